package sdktest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/ingesttest"
)

// pipeline is a running stack of the real binaries under a unique topic
// and index prefix: ingest, symbolizer, indexer, query.
type pipeline struct {
	brokers                             []string
	name, bin                           string
	ingestAddr, otlpGRPCAddr, queryAddr string
}

// startPipeline builds the binaries and starts them, with extra
// environment variables.
func startPipeline(t *testing.T, extraEnv ...string) *pipeline {
	brokers := testenv.KafkaBrokers(t)
	osURL := testenv.OpenSearchURL(t)
	bin := t.TempDir()
	for _, b := range []struct{ name, dir string }{
		{"stackstream-ingest", "../../cmd/stackstream-ingest"},
		{"stackstream-symbolizer", "../../../symbolizer/cmd/stackstream-symbolizer"},
		{"stackstream-indexer", "../../../indexer/cmd/stackstream-indexer"},
		{"stackstream-query", "../../../query/cmd/stackstream-query"},
		{"stackctl", "../../../ctl/cmd/stackctl"},
	} {
		testenv.Run(t, b.dir, nil, "go", "build", "-o", filepath.Join(bin, b.name), ".")
	}

	p := &pipeline{brokers: brokers, bin: bin, name: testenv.Name(t, "ingest-e2e-"),
		ingestAddr: freeAddr(t), otlpGRPCAddr: freeAddr(t), queryAddr: freeAddr(t)}
	name := p.name
	env := []string{
		"STACKSTREAM_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"STACKSTREAM_KAFKA_TOPIC_PREFIX=" + name + ".",
		"STACKSTREAM_OPENSEARCH_URL=" + osURL,
		"STACKSTREAM_OPENSEARCH_INDEX_PREFIX=" + name + "-",
		"STACKSTREAM_OPENSEARCH_INDEX_REFRESH_INTERVAL=1s",
		"STACKSTREAM_CTL_PARTITIONS=2",
		"STACKSTREAM_SYMBOLIZER_GROUP=" + name + "-symbolizer",
		"STACKSTREAM_SYMBOLIZER_TRANSACTIONAL_ID=" + name + "-symbolizer-0",
		"STACKSTREAM_INDEXER_GROUP=" + name + "-indexer",
		"STACKSTREAM_INGEST_LISTEN_ADDR=" + p.ingestAddr,
		"STACKSTREAM_INGEST_OTLP_GRPC_ADDR=" + p.otlpGRPCAddr,
		"STACKSTREAM_INGEST_OTLP_HTTP_ADDR=off",
		"STACKSTREAM_QUERY_LISTEN_ADDR=" + p.queryAddr,
	}
	env = append(env, extraEnv...)
	t.Cleanup(func() { cleanup(brokers, name, osURL) })
	testenv.Run(t, t.TempDir(), env, filepath.Join(bin, "stackctl"), "init")
	for _, svc := range []string{"stackstream-symbolizer", "stackstream-indexer", "stackstream-query", "stackstream-ingest"} {
		start(t, filepath.Join(bin, svc), append(env, "STACKSTREAM_LISTEN_ADDR="+freeAddr(t)))
	}
	waitHTTP(t, "http://"+p.ingestAddr+"/healthz")
	return p
}

// TestPipelineGoSDK follows a push of the real Go SDK through the real
// binaries: stackstream-ingest, the symbolizer (which passes the named
// frames through), the indexer and the query API, whose top functions of
// the application put the SDK program's hot function first, with exactly
// the CPU time the records on profiles.raw hold for it.
func TestPipelineGoSDK(t *testing.T) {
	p := startPipeline(t)
	brokers, name, bin, queryAddr, ingestAddr := p.brokers, p.name, p.bin, p.queryAddr, p.ingestAddr
	testenv.Run(t, "../../testdata/gosdk", []string{"GOWORK=off", "GOFLAGS=-mod=readonly"}, "go", "build", "-o", filepath.Join(bin, "gosdk"), ".")

	out, err := exec.Command(filepath.Join(bin, "gosdk"), "-server", "http://"+ingestAddr, "-app", name, "-for", "4s").CombinedOutput()
	if err != nil {
		t.Fatalf("gosdk: %v\n%s", err, out)
	}

	// What the query API must show: the hot function's CPU time in every
	// record the SDK's pushes became (however much CPU it got on a busy
	// machine).
	var want int64
	for _, r := range ingesttest.Attach(t, brokers, record.TopicsFor(name+".")).ReadAll(t, 30*time.Second) {
		if r.Meta.Type != record.ProfileCPU {
			continue
		}
		for _, s := range r.Profile.Sample {
			if s.Location[0].Line[0].Function.Name == "main.stackstreamHotFunction" {
				want += s.Value[len(s.Value)-1]
			}
		}
	}
	if want == 0 {
		t.Fatal("no cpu record on profiles.raw holds main.stackstreamHotFunction")
	}

	sel := url.QueryEscape(`{service="` + name + `"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var top struct {
		Functions []struct {
			Name string `json:"name"`
			Self int64  `json:"self"`
		} `json:"functions"`
	}
	for {
		top.Functions = nil
		if getJSON("http://"+queryAddr+"/api/v1/top?type=cpu&from=now-15m&to=now&limit=5&query="+sel, &top) == nil &&
			len(top.Functions) > 0 && top.Functions[0].Name == "main.stackstreamHotFunction" && top.Functions[0].Self == want {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the query API's top functions of %s never put main.stackstreamHotFunction first with the %s of CPU its records hold: %+v", name, time.Duration(want), top.Functions)
		case <-time.After(time.Second):
		}
	}
	t.Logf("top functions of %s: %+v", name, top.Functions)
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// start runs a binary until the test ends; its output goes to the test log
// when the test fails.
func start(t *testing.T, bin string, env []string) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			s := out.String()
			if len(s) > 4000 {
				s = "..." + s[len(s)-4000:]
			}
			t.Logf("---- %s output ----\n%s", filepath.Base(bin), s)
		}
	})
}

func waitHTTP(t *testing.T, u string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer: %v", u, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func getJSON(u string, v any) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// cleanup removes the test's topics, indices and templates.
func cleanup(brokers []string, name, osURL string) {
	ctx := context.Background()
	if cl, err := kafka.NewClient(ctx, kafka.Config{Brokers: brokers, DialTimeout: 5 * time.Second}); err == nil {
		kadm.NewClient(cl).DeleteTopics(ctx, kafka.Config{TopicPrefix: name + "."}.Topics().All()...)
		cl.Close()
	}
	for _, path := range []string{"/" + name + "-*", "/_index_template/" + name + "-*"} {
		req, _ := http.NewRequest(http.MethodDelete, osURL+path, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
}

// Package e2e runs the whole pipeline: the real binaries against the real
// kernel, Kafka broker and OpenSearch node, each test under its own topic and
// index prefix so it never touches a deployment's data.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/testenv"
)

// binaries are built once per test run into a temporary directory.
var binaries = []string{"stackstream-agent", "stackstream-symbolizer", "stackstream-indexer", "stackstream-rollup", "stackstream-query", "stackctl"}

func buildAll(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range binaries {
		pkg := "../services/" + strings.TrimPrefix(b, "stackstream-") + "/cmd/" + b
		if b == "stackctl" {
			pkg = "../services/ctl/cmd/stackctl"
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, b), pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("build %s: %v\n%s", b, err, out)
		}
	}
	return dir
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// start runs a binary with env until the test ends; its output goes to the
// test log when the test fails.
func start(t *testing.T, bin string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
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
			t.Logf("---- %s output ----\n%s", filepath.Base(bin), tail(out.String(), 4000))
		}
	})
	return cmd
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// TestPipeline profiles a C workload with the agent and follows its samples
// through the symbolizer, indexer and rollup into the query API: the flame
// graph, top functions, search and series all show the workload's hot function;
// the time it spends preempted shows in the offcpu type.
func TestPipeline(t *testing.T) {
	testenv.Root(t)
	brokers := testenv.KafkaBrokers(t)
	osURL := testenv.OpenSearchURL(t)
	bin := buildAll(t)

	work := filepath.Join(t.TempDir(), "e2e-hot")
	if out, err := exec.Command("gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-o", work, "testdata/hot.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	workload := exec.Command(work)
	if err := workload.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { workload.Process.Kill(); workload.Wait() })

	name := testenv.Name(t, "e2e-")
	queryAddr := freeAddr(t)
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
		"STACKSTREAM_ROLLUP_GROUP=" + name + "-rollup",
		"STACKSTREAM_ROLLUP_ALLOWED_LATENESS=5s",
		"STACKSTREAM_AGENT_INTERVAL=2s",
		"STACKSTREAM_AGENT_HOST_ID=" + name,
		"STACKSTREAM_AGENT_PIDS=" + strconv.Itoa(workload.Process.Pid),
		// The spinning workload is off the CPU only when preempted: record
		// more of its switches than the default 1 in 100.
		"STACKSTREAM_AGENT_OFFCPU_PROBABILITY=0.1",
		"STACKSTREAM_QUERY_LISTEN_ADDR=" + queryAddr,
	}
	t.Cleanup(func() { cleanup(t, brokers, name, osURL) })

	ctl := exec.Command(filepath.Join(bin, "stackctl"), "init")
	ctl.Env = append(os.Environ(), env...)
	if out, err := ctl.CombinedOutput(); err != nil {
		t.Fatalf("stackctl init: %v\n%s", err, out)
	}
	// Each service gets its own metrics port.
	metricsAddr := map[string]string{}
	for _, svc := range []string{"stackstream-symbolizer", "stackstream-indexer", "stackstream-rollup", "stackstream-query", "stackstream-agent"} {
		metricsAddr[svc] = freeAddr(t)
		start(t, filepath.Join(bin, svc), append(env, "STACKSTREAM_LISTEN_ADDR="+metricsAddr[svc]))
	}

	base := "http://" + queryAddr + "/api/v1/"
	sel := url.QueryEscape(`{host="` + name + `"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The flame graph shows the hot function under its caller; top
	// functions put it first by self time.
	checkHotWorkload(ctx, t, base, sel)

	// The rollups give a CPU series of about one core (the workload spins).
	waitFor(ctx, t, "cpu series from the rollups", func() bool {
		var s struct {
			Series []struct {
				Points [][2]float64 `json:"points"`
			} `json:"series"`
		}
		if getJSON(base+"series?type=cpu&from=now-15m&to=now&group_by=host&query="+sel, &s) != nil {
			return false
		}
		for _, ser := range s.Series {
			for _, p := range ser.Points {
				if p[1] > 0.3 {
					return true
				}
			}
		}
		return false
	})

	// The off-CPU type: the workload preempted in its hot loop, symbolized.
	waitFor(ctx, t, "offcpu flame graph with e2e_hot_loop", func() bool {
		var off struct {
			Unit  string    `json:"unit"`
			Total int64     `json:"total"`
			Root  flameNode `json:"root"`
		}
		if getJSON(base+"flamegraph?type=offcpu&from=now-15m&to=now&query="+sel, &off) != nil || off.Total == 0 {
			return false
		}
		return off.Unit == "nanoseconds" && off.Root.find("e2e_hot_loop") != nil
	})

	// Keyword search finds the function.
	waitFor(ctx, t, "search result for e2e_hot", func() bool {
		var res struct {
			Results []struct {
				Kind, Name string
			} `json:"results"`
		}
		if getJSON(base+"search?q=e2e_hot&from=now-15m&to=now", &res) != nil {
			return false
		}
		for _, r := range res.Results {
			if r.Kind == "function" && r.Name == "e2e_hot_loop" {
				return true
			}
		}
		return false
	})

	// The indexer decoded the real agent's and symbolizer's profiles on its
	// fast path; the general path is for other shapes and broken records.
	fast, general := metricValue(t, metricsAddr["stackstream-indexer"], `stackstream_indexer_decoded_records_total{path="fast"}`),
		metricValue(t, metricsAddr["stackstream-indexer"], `stackstream_indexer_decoded_records_total{path="general"}`)
	if fast == 0 || general != 0 {
		t.Errorf("indexer decoded %v records on the fast path and %v on the general one, want all on the fast path", fast, general)
	}
}

// metricValue reads one sample of a Prometheus text exposition; absent is 0.
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// checkHotWorkload waits until the flame graph of sel shows e2e_hot_loop
// holding most of the CPU under its caller e2e_caller, and checks that the
// top functions put it first by self time; it returns the flame graph's
// total. The first profiles of a new binary can race its debuginfo (the
// symbolizer follows that topic asynchronously) and keep addresses; the ones
// after must resolve, so the hot function's share climbs past half.
func checkHotWorkload(ctx context.Context, t *testing.T, base, sel string) int64 {
	t.Helper()
	var fg struct {
		Total int64     `json:"total"`
		Root  flameNode `json:"root"`
	}
	waitFor(ctx, t, "flame graph with e2e_hot_loop holding most of the CPU", func() bool {
		if getJSON(base+"flamegraph?type=cpu&from=now-15m&to=now&query="+sel, &fg) != nil || fg.Total == 0 {
			return false
		}
		hot := fg.Root.find("e2e_hot_loop")
		return hot != nil && float64(hot.Total)/float64(fg.Total) > 0.5
	})
	if fg.Root.find("e2e_caller") == nil {
		t.Errorf("caller e2e_caller missing from the flame graph")
	}
	var top struct {
		Functions []struct {
			Name string `json:"name"`
			Self int64  `json:"self"`
		} `json:"functions"`
	}
	if err := getJSON(base+"top?type=cpu&from=now-15m&to=now&limit=5&query="+sel, &top); err != nil {
		t.Fatal(err)
	}
	if len(top.Functions) == 0 || top.Functions[0].Name != "e2e_hot_loop" {
		t.Errorf("top functions = %+v, want e2e_hot_loop first", top.Functions)
	}
	return fg.Total
}

type flameNode struct {
	Name     string      `json:"name"`
	Total    int64       `json:"total"`
	Children []flameNode `json:"children"`
}

func (n *flameNode) find(name string) *flameNode {
	if n.Name == name {
		return n
	}
	for i := range n.Children {
		if f := n.Children[i].find(name); f != nil {
			return f
		}
	}
	return nil
}

func getJSON(u string, v any) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, body)
	}
	return json.Unmarshal(body, v)
}

func waitFor(ctx context.Context, t *testing.T, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(2 * time.Second):
		}
	}
}

// cleanup removes the test's topics, indices and templates.
func cleanup(t *testing.T, brokers []string, name, osURL string) {
	ctx := context.Background()
	cl, err := kafka.NewClient(ctx, kafka.Config{Brokers: brokers, DialTimeout: 5 * time.Second})
	if err == nil {
		adm := kadm.NewClient(cl)
		adm.DeleteTopics(ctx, kafka.Config{TopicPrefix: name + "."}.Topics().All()...)
		cl.Close()
	}
	for _, path := range []string{"/" + name + "-*", "/_index_template/" + name + "-*"} {
		req, _ := http.NewRequest(http.MethodDelete, osURL+path, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
}

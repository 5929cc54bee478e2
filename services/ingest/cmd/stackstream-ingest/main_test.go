package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/ingesttest"
)

// TestBinary runs the real binary against the broker: it starts, takes a
// push with a tenant's token, answers /healthz and /readyz, stops on
// SIGTERM with status 0, and never writes the token to its log.
func TestBinary(t *testing.T) {
	env := ingesttest.Setup(t, nil) // the topics; its own server is not used
	bin := filepath.Join(t.TempDir(), "stackstream-ingest")
	testenv.Run(t, ".", nil, "go", "build", "-o", bin, ".")
	const token = "zq9-secret-token"
	cmd := exec.Command(bin)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(),
		"STACKSTREAM_KAFKA_BROKERS="+strings.Join(env.Brokers, ","),
		"STACKSTREAM_KAFKA_TOPIC_PREFIX="+strings.TrimSuffix(env.Topics.ProfilesRaw, record.TopicProfilesRaw),
		"STACKSTREAM_INGEST_LISTEN_ADDR=127.0.0.1:0",
		"STACKSTREAM_INGEST_OTLP_GRPC_ADDR=127.0.0.1:0",
		"STACKSTREAM_INGEST_OTLP_HTTP_ADDR=127.0.0.1:0",
		"STACKSTREAM_INGEST_TOKENS=team-a:"+token,
		"STACKSTREAM_LOG_LEVEL=debug")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	lines := bufio.NewScanner(stderr)
	addr, grpcAddr, otlpHTTPAddr := "", "", ""
	for addr == "" && lines.Scan() {
		logs.WriteString(lines.Text() + "\n")
		if m := regexp.MustCompile(`msg=started .*listen=(\S+) otlp_grpc=(\S+) otlp_http=(\S+)`).FindStringSubmatch(lines.Text()); m != nil {
			addr, grpcAddr, otlpHTTPAddr = m[1], m[2], m[3]
		}
	}
	if addr == "" {
		cmd.Process.Kill()
		t.Fatalf("no started line:\n%s", logs.String())
	}
	done := make(chan struct{})
	go func() {
		for lines.Scan() {
			logs.WriteString(lines.Text() + "\n")
		}
		close(done)
	}()

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/ingest?name=binapp.cpu%7Bhostname%3Dbin-host%7D", strings.NewReader("main;hot 10\n"))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("push: %d %s", resp.StatusCode, body)
	}
	resp, err = http.Post("http://"+addr+"/ingest?name=binapp.cpu", "", strings.NewReader("main;hot 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("push without a token: %d", resp.StatusCode)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
	// OTLP over gRPC and over HTTP on their own ports, with the token.
	pd := ingesttest.EBPFProfilerRequest(time.Now())
	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	if _, err := pprofileotlp.NewGRPCClient(cc).Export(ctx, pprofileotlp.NewExportRequestFromProfiles(pd)); err != nil {
		t.Fatalf("otlp grpc: %v", err)
	}
	if _, err := pprofileotlp.NewGRPCClient(cc).Export(context.Background(), pprofileotlp.NewExportRequestFromProfiles(pd)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("otlp grpc without a token: %v", err)
	}
	otlpBody, _ := pprofileotlp.NewExportRequestFromProfiles(pd).MarshalProto()
	req, _ = http.NewRequest(http.MethodPost, "http://"+otlpHTTPAddr+"/v1development/profiles", bytes.NewReader(otlpBody))
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("otlp http: %v %v", resp, err)
	}
	resp.Body.Close()

	recs := env.Read(t, 5, 30*time.Second)
	hosts := map[string]int{}
	for _, r := range recs {
		if ingesttest.Label(r.Profile, "tenant") != "team-a" {
			t.Errorf("record of %s without the tenant", r.Key)
		}
		hosts[r.Key]++
	}
	// The OTLP request holds a CPU and an off-CPU profile: two records each.
	if len(recs) != 5 || hosts["bin-host"] != 1 || hosts[ingesttest.OTLPHost] != 4 {
		t.Fatalf("records by host: %v", hosts)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	<-done
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, logs.String())
	}
	if !regexp.MustCompile(`msg=stopped .*signal=terminated`).MatchString(logs.String()) {
		t.Errorf("no stopped line:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), token) {
		t.Errorf("the log shows the token:\n%s", logs.String())
	}
}

// TestConfigError: a bad value stops start-up with one line naming the variable.
func TestConfigError(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "stackstream-ingest")
	testenv.Run(t, ".", nil, "go", "build", "-o", bin, ".")
	cmd := exec.Command(bin)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "STACKSTREAM_INGEST_TOKENS=team-a:")
	out, err := cmd.CombinedOutput()
	if err == nil || strings.TrimSpace(string(out)) != "stackstream-ingest: config: STACKSTREAM_INGEST_TOKENS: entry 1: the token is empty: write tenant:token or token" {
		t.Fatalf("%v: %q", err, out)
	}
}

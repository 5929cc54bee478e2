package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/symbolizer/internal/ktest"
	"github.com/stackstream/stackstream/services/symbolizer/internal/testbin"
)

// buildBinary compiles this command, as `make build` would.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "stackstream-symbolizer")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type proc struct {
	cmd *exec.Cmd
	log string
}

func startProc(t *testing.T, bin string, env []string, name string) *proc {
	t.Helper()
	dir := t.TempDir()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, log: logPath}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		}
		f.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", name, out)
		}
	})
	return p
}

func (p *proc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait()
}

// TestKill9ExactlyOnce runs two symbolizer processes on one group while
// profiles flow, SIGKILLs each mid-stream and restarts it, then reads
// profiles.symbolized with read-committed isolation: every input profile is
// there exactly once, symbolized as expected.
func TestKill9ExactlyOnce(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	corpus := testbin.BuildCorpus(t, t.TempDir())
	bin := buildBinary(t)
	topics, cl := ktest.Topics(t, brokers, 4)
	prefix := strings.TrimSuffix(topics.ProfilesRaw, record.TopicProfilesRaw)
	group := testenv.Name(t, "grp-")
	// The instances compress their batches differently: consumers read
	// both, and the setting is seen to apply.
	env := func(txnID, codec string) []string {
		return []string{
			"STACKSTREAM_SYMBOLIZER_BATCH_COMPRESSION=" + codec,
			"STACKSTREAM_KAFKA_BROKERS=" + strings.Join(brokers, ","),
			"STACKSTREAM_KAFKA_TOPIC_PREFIX=" + prefix,
			"STACKSTREAM_SYMBOLIZER_GROUP=" + group,
			"STACKSTREAM_SYMBOLIZER_TRANSACTIONAL_ID=" + txnID,
			"STACKSTREAM_SYMBOLIZER_DEBUG_DIRS=" + corpus.AllDir,
			"STACKSTREAM_SYMBOLIZER_MAX_POLL_RECORDS=5",
			// The broker's minimum: a killed member's partitions move on
			// within seconds.
			"STACKSTREAM_SYMBOLIZER_SESSION_TIMEOUT=6s",
			"STACKSTREAM_LISTEN_ADDR=127.0.0.1:0",
			"DEBUGINFOD_URLS=",
		}
	}
	txnA, txnB := testenv.Name(t, "txn-a-"), testenv.Name(t, "txn-b-")
	a := startProc(t, bin, env(txnA, "snappy"), "a")
	b := startProc(t, bin, env(txnB, "zstd"), "b")

	const n = 300
	meta := record.Meta{Type: record.ProfileCPU, Host: "h", AgentVersion: "test"}
	inputs := make([][]byte, n)
	for i := range inputs {
		v, err := record.EncodeProfile(corpus.Profile(t, i))
		if err != nil {
			t.Fatal(err)
		}
		inputs[i] = v
	}
	var wg sync.WaitGroup
	var produceErr error
	var mu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			r := &kgo.Record{Topic: topics.ProfilesRaw, Key: []byte(fmt.Sprint("host-", i%16)), Value: inputs[i], Headers: meta.Headers()}
			if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
				mu.Lock()
				produceErr = err
				mu.Unlock()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	// Kill each instance while records flow and restart it under the same
	// transactional ID, which fences and aborts its open transaction.
	time.Sleep(1500 * time.Millisecond)
	a.kill9(t)
	a = startProc(t, bin, env(txnA, "snappy"), "a2")
	time.Sleep(1200 * time.Millisecond)
	b.kill9(t)
	b = startProc(t, bin, env(txnB, "zstd"), "b2")
	wg.Wait()
	if produceErr != nil {
		t.Fatal(produceErr)
	}

	out := ktest.Consume(t, brokers, topics.ProfilesSymbolized, n, 3*time.Minute, 5*time.Second)
	seen := map[int]int{}
	codecs := map[uint8]int{}
	want := corpus.Want()
	for _, r := range out {
		codecs[r.Attrs.CompressionType()]++
		p, err := record.DecodeProfile(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		seq, err := strconv.Atoi(p.Sample[0].Label["seq"][0])
		if err != nil {
			t.Fatal(err)
		}
		seen[seq]++
		if got := testbin.Names(p); !reflect.DeepEqual(got, want) {
			t.Fatalf("profile %d symbolized as %q, want %q", seq, got, want)
		}
		in, _ := record.DecodeProfile(inputs[seq])
		if p.TimeNanos != in.TimeNanos || len(p.Sample) != len(in.Sample) {
			t.Fatalf("profile %d: time or samples changed", seq)
		}
		for i := range p.Sample {
			if !reflect.DeepEqual(p.Sample[i].Value, in.Sample[i].Value) || !reflect.DeepEqual(p.Sample[i].Label, in.Sample[i].Label) {
				t.Fatalf("profile %d sample %d: values or labels changed", seq, i)
			}
		}
	}
	dups, missing := 0, 0
	for i := 0; i < n; i++ {
		switch c := seen[i]; {
		case c == 0:
			missing++
		case c > 1:
			dups++
		}
	}
	if dups != 0 || missing != 0 || len(out) != n {
		t.Fatalf("%d records for %d inputs: %d missing, %d duplicated", len(out), n, missing, dups)
	}
	// Kafka's codec numbers: 2 snappy, 4 zstd.
	if codecs[2]+codecs[4] != n || codecs[4] == 0 {
		t.Fatalf("records by batch codec %v, want snappy (2) and zstd (4) only, some of each", codecs)
	}
	// Read uncommitted, the log also holds what the killed instances wrote
	// in transactions that never committed: more records than inputs shows
	// the kills landed mid-transaction.
	raw, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics.ProfilesSymbolized),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	uncommitted := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		f := raw.PollFetches(ctx)
		cancel()
		if f.NumRecords() == 0 {
			break
		}
		uncommitted += f.NumRecords()
	}
	t.Logf("read committed: %d records; read uncommitted: %d (%d from aborted transactions)", len(out), uncommitted, uncommitted-len(out))

	logA, _ := os.ReadFile(a.log)
	if !strings.Contains(string(logA), "symbolizing") {
		t.Fatalf("restarted instance never started symbolizing:\n%s", logA)
	}

	// The restarted instances serve /readyz and /metrics, and SIGTERM
	// stops them cleanly.
	var total float64
	for _, p := range []*proc{a, b} {
		addr := listenAddr(t, p.log)
		if body := get(t, "http://"+addr+"/readyz"); !strings.Contains(body, "ready") {
			t.Fatalf("readyz: %q", body)
		}
		metrics := get(t, "http://"+addr+"/metrics")
		for _, name := range []string{"stackstream_symbolizer_frames_total{source=\"local\"}", "stackstream_symbolizer_cache_requests_total", "stackstream_symbolizer_lag_records", "stackstream_symbolizer_transactions_total{result=\"committed\"}"} {
			if !strings.Contains(metrics, name) {
				t.Errorf("metrics lack %s", name)
			}
		}
		total += metricValue(metrics, `stackstream_symbolizer_records_total{outcome="symbolized"}`)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
		if log, _ := os.ReadFile(p.log); !strings.Contains(string(log), "msg=stopped") {
			t.Fatalf("no clean stop in log:\n%s", log)
		}
	}
	if total == 0 || total > n {
		t.Fatalf("restarted instances report %v profiles symbolized", total)
	}
}

var listenRE = regexp.MustCompile(`msg=starting .*listen=(127\.0\.0\.1:\d+)`)

func listenAddr(t *testing.T, logPath string) string {
	t.Helper()
	log, _ := os.ReadFile(logPath)
	m := listenRE.FindSubmatch(log)
	if m == nil {
		t.Fatalf("no listen address in log:\n%s", log)
	}
	return string(m[1])
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func metricValue(metrics, series string) float64 {
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

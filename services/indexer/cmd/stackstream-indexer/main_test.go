package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/indexer/internal/indexertest"
)

// build compiles the real binary once per test.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "stackstream-indexer")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type proc struct {
	cmd *exec.Cmd
	log *bytes.Buffer
}

// spawn starts the binary with env on top of a clean STACKSTREAM_* environment,
// in an empty directory so no .env is read.
func spawn(t *testing.T, bin string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STACKSTREAM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, log: &log}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("indexer pid %d output:\n%s", cmd.Process.Pid, log.String())
		}
	})
	return p
}

func envFor(e *indexertest.Env) []string {
	return []string{
		"STACKSTREAM_KAFKA_BROKERS=" + strings.Join(e.Brokers, ","),
		"STACKSTREAM_KAFKA_TOPIC_PREFIX=" + strings.TrimSuffix(e.Topics.ProfilesSymbolized, "profiles.symbolized"),
		"STACKSTREAM_OPENSEARCH_URL=" + e.URL,
		"STACKSTREAM_OPENSEARCH_INDEX_PREFIX=" + e.Names.Prefix,
		"STACKSTREAM_OPENSEARCH_INDEX_REFRESH_INTERVAL=1s",
		"STACKSTREAM_INDEXER_GROUP=" + e.Group,
		"STACKSTREAM_INDEXER_FLUSH_INTERVAL=200ms",
		"STACKSTREAM_INDEXER_RETENTION_DAYS=0",
		"STACKSTREAM_LISTEN_ADDR=127.0.0.1:0",
	}
}

// TestTwoInstancesOneKilled runs two indexers of one group and kills one with
// SIGKILL mid-stream: the survivor takes its partitions over from the last
// commit, and the totals are exact.
func TestTwoInstancesOneKilled(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	url := testenv.OpenSearchURL(t)
	e := indexertest.Setup(t, brokers, url, testenv.Name(t, "ix-"), 4)
	recs, want, err := indexertest.Corpus{
		Seed: 7, Hosts: 8, ProfilesPerHost: 20,
		Start: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), Interval: 10 * time.Second,
		Stacks: 60, Depth: 16, Processes: 6, SamplesPerProf: 80, RawPerSample: 8,
	}.Build()
	if err != nil {
		t.Fatal(err)
	}
	bin := build(t)
	a := spawn(t, bin, envFor(e)...)
	b := spawn(t, bin, envFor(e)...)

	chunk := len(recs) / 20
	for i := 0; i < len(recs); i += chunk {
		e.Produce(t, recs[i:min(i+chunk, len(recs))])
		if i == 6*chunk {
			if err := a.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			a.cmd.Wait()
		}
		time.Sleep(150 * time.Millisecond)
	}
	// The killed member's partitions move once its session times out.
	e.WaitCaughtUp(t, 3*time.Minute)
	if err := e.ReadStored(t).Check(want); err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Wait(); err != nil {
		t.Fatalf("survivor on SIGTERM: %v", err)
	}
	if !strings.Contains(b.log.String(), "msg=stopped") {
		t.Fatalf("survivor did not log a clean stop")
	}
}

func TestConfigErrors(t *testing.T) {
	bin := build(t)
	tests := []struct {
		name string
		env  []string
		want string
		code int
	}{
		{"help", nil, "STACKSTREAM_INDEXER_RETENTION_DAYS", 0},
		{"bad batch", []string{"STACKSTREAM_INDEXER_BATCH_BYTES=10"}, "STACKSTREAM_INDEXER_BATCH_BYTES=10 is too small", 1},
		{"bad duration", []string{"STACKSTREAM_INDEXER_FLUSH_INTERVAL=soon"}, "STACKSTREAM_INDEXER_FLUSH_INTERVAL", 1},
		{"negative merge age", []string{"STACKSTREAM_INDEXER_MERGE_AFTER=-1h"}, "STACKSTREAM_INDEXER_MERGE_AFTER=-1h0m0s must be 0", 1},
		{"negative workers", []string{"STACKSTREAM_INDEXER_WORKERS=-2"}, "STACKSTREAM_INDEXER_WORKERS=-2 must be 0", 1},
		{"negative clock skew", []string{"STACKSTREAM_INDEXER_MAX_CLOCK_SKEW=-1m"}, "STACKSTREAM_INDEXER_MAX_CLOCK_SKEW=-1m0s must be positive", 1},
		{"no opensearch", []string{"STACKSTREAM_OPENSEARCH_URL=http://127.0.0.1:1"}, "STACKSTREAM_OPENSEARCH_URL=http://127.0.0.1:1", 1},
		{"no topics", []string{"STACKSTREAM_KAFKA_TOPIC_PREFIX=no-such-prefix-" + strconv.Itoa(os.Getpid()) + ".",
			"STACKSTREAM_INDEXER_GROUP=no-such-group-" + strconv.Itoa(os.Getpid())}, "profiles.symbolized is missing: run stackctl init", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{}
			if tt.name == "help" {
				args = append(args, "-h")
			}
			env := tt.env
			if tt.name == "no topics" {
				// The test services, wherever they run: the indexer must get
				// past them to the missing topic.
				env = append([]string{"STACKSTREAM_KAFKA_BROKERS=" + strings.Join(testenv.KafkaBrokers(t), ","),
					"STACKSTREAM_OPENSEARCH_URL=" + testenv.OpenSearchURL(t)}, env...)
			}
			cmd := exec.Command(bin, args...)
			cmd.Dir = t.TempDir()
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code || !strings.Contains(string(out), tt.want) {
				t.Fatalf("exit %d, output %q; want exit %d and %q", code, out, tt.code, tt.want)
			}
		})
	}
}

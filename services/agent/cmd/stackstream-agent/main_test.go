package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
)

func TestFlagsOverrideEnvironment(t *testing.T) {
	t.Setenv("STACKSTREAM_AGENT_FREQUENCY", "49")
	t.Setenv("STACKSTREAM_AGENT_INTERVAL", "5s")
	t.Setenv("STACKSTREAM_AGENT_SYSTEMD_UNITS", "a.service")
	var c cfg
	args := []string{"--frequency=99", "--systemd-units=opensearch.service,kafka", "--pids", "1,2"}
	if err := config.Load(&c, args, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if err := flags(&c.Agent).Parse(args); err != nil {
		t.Fatal(err)
	}
	if c.Agent.Frequency != 99 || c.Agent.Interval != 5*time.Second {
		t.Fatalf("frequency %d interval %s: want the flag's 99 and the environment's 5s", c.Agent.Frequency, c.Agent.Interval)
	}
	if strings.Join(c.Agent.SystemdUnits, ",") != "opensearch.service,kafka" || len(c.Agent.PIDs) != 2 {
		t.Fatalf("units %v pids %v", c.Agent.SystemdUnits, c.Agent.PIDs)
	}
	if err := flags(&c.Agent).Parse([]string{"--pids=x"}); err == nil {
		t.Fatal("want an error for --pids=x")
	}
}

// TestMissingCapabilities runs the binary without CAP_BPF and CAP_PERFMON:
// it must exit with one line naming what is missing and how to run it.
func TestMissingCapabilities(t *testing.T) {
	testenv.Root(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		testenv.Unavailable(t, "setpriv (util-linux)")
	}
	bin := filepath.Join(t.TempDir(), "stackstream-agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	os.Chmod(filepath.Dir(bin), 0o755)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"root without bpf, perfmon, sys_admin", []string{"--bounding-set=-bpf,-perfmon,-sys_admin", "--inh-caps=-all"}, "missing capability CAP_BPF+CAP_PERFMON"},
		{"root without perfmon, sys_admin", []string{"--bounding-set=-perfmon,-sys_admin", "--inh-caps=-all"}, "missing capability CAP_PERFMON"},
		{"user nobody", []string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"}, "missing capability CAP_BPF+CAP_PERFMON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("setpriv", append(tt.args, bin, "--interval=1s")...)
			cmd.Dir = t.TempDir()
			os.Chmod(cmd.Dir, 0o755)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Fatalf("exit %v, want status 1; stderr %q", err, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tt.want) || !strings.Contains(lines[0], "run as root") {
				t.Fatalf("stderr %q, want one line with %q and how to run it", stderr.String(), tt.want)
			}
		})
	}
}

// TestStopsOnSIGTERM runs the real agent against the broker and stops it
// with SIGTERM: it exits 0 and logs the signal by name.
func TestStopsOnSIGTERM(t *testing.T) {
	testenv.Root(t)
	brokers := testenv.KafkaBrokers(t)
	prefix := testenv.Name(t, "agent-") + "."
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics := record.TopicsFor(prefix)
	if _, err := kafka.EnsureTopics(ctx, adm, kafka.Specs(topics, 1, 1)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), topics.All()...) })

	bin := filepath.Join(t.TempDir(), "stackstream-agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--interval=1s", fmt.Sprintf("--pids=%d", os.Getpid()))
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "STACKSTREAM_KAFKA_BROKERS="+strings.Join(brokers, ","), "STACKSTREAM_KAFKA_TOPIC_PREFIX="+prefix)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(out.String(), "msg=listening"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("agent did not start:\n%s", out.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit on SIGTERM: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "signal=terminated") {
		t.Fatalf("the stop line does not name the signal:\n%s", out.String())
	}
}

// lockedBuffer is the process's output, read while it is written.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestValidFlagReplacesBadVariable: the configuration is checked once, after
// the flags override the environment, so a variable the agent would refuse
// does not stop start-up when a valid flag replaces it; alone it still does,
// naming the variable.
func TestValidFlagReplacesBadVariable(t *testing.T) {
	t.Chdir(t.TempDir()) // no .env
	t.Setenv("STACKSTREAM_AGENT_FREQUENCY", "0")
	c, err := loadConfig([]string{"--frequency=19"}, io.Discard)
	if err != nil {
		t.Fatalf("bad variable, valid flag: %v", err)
	}
	if c.Agent.Frequency != 19 {
		t.Fatalf("frequency %d, want the flag's 19", c.Agent.Frequency)
	}
	if _, err := loadConfig(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "STACKSTREAM_AGENT_FREQUENCY=0") {
		t.Fatalf("bad variable alone: %v, want an error naming STACKSTREAM_AGENT_FREQUENCY=0", err)
	}
	if _, err := loadConfig([]string{"--frequency=5000"}, io.Discard); err == nil || !strings.Contains(err.Error(), "STACKSTREAM_AGENT_FREQUENCY=5000") {
		t.Fatalf("bad flag: %v, want an error naming the value", err)
	}
}

func TestMaxProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, tc := range []struct {
		name       string
		gomaxprocs string
		n, want    int
	}{
		{name: "default", n: 1, want: 1},
		{name: "GOMAXPROCS wins", gomaxprocs: "3", n: 1, want: 3},
		{name: "0 leaves the runtime's", n: 0, want: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", tc.gomaxprocs)
			runtime.GOMAXPROCS(5) // the runtime's own choice, or GOMAXPROCS's at start
			if tc.gomaxprocs != "" {
				runtime.GOMAXPROCS(3)
			}
			setMaxProcs(tc.n)
			if got := runtime.GOMAXPROCS(0); got != tc.want {
				t.Fatalf("GOMAXPROCS %d, want %d", got, tc.want)
			}
		})
	}
}

func TestMaxProcsConfig(t *testing.T) {
	t.Chdir(t.TempDir()) // no .env
	c, err := loadConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent.MaxProcs != 1 {
		t.Fatalf("default STACKSTREAM_AGENT_MAX_PROCS %d, want 1", c.Agent.MaxProcs)
	}
	t.Setenv("STACKSTREAM_AGENT_MAX_PROCS", "-1")
	if _, err := loadConfig(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "STACKSTREAM_AGENT_MAX_PROCS=-1") {
		t.Fatalf("negative: %v, want an error naming STACKSTREAM_AGENT_MAX_PROCS", err)
	}
}

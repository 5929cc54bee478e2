package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/services/agent/internal/elfinfo"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/publish"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

// waitFor polls cond until it holds, failing t after limit: a bound on
// liveness (a blocked tick never gets there), not a timing assertion.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// accessModes runs f through /proc/PID/map_files and through the path in the
// process's root (the agent without CAP_SYS_ADMIN).
func accessModes(t *testing.T, f func(t *testing.T, mapFiles bool)) {
	for _, mapFiles := range []bool{true, false} {
		name := "path"
		if mapFiles {
			name = "map_files"
		}
		t.Run(name, func(t *testing.T) { f(t, mapFiles) })
	}
}

// TestDeletedExecutableFIFO runs a process whose executable was deleted and
// replaced by a FIFO named like the deleted file, which is what maps shows:
// opening that FIFO for reading would wait for a writer forever. Ticks must
// go on; through map_files the deleted executable itself is read and named.
func TestDeletedExecutableFIFO(t *testing.T) {
	accessModes(t, func(t *testing.T, mapFiles bool) {
		e := newEnv(t)
		exe := workload.BuildC(t, t.TempDir(), "fifodel", false)
		p := workload.Start(t, exe, 0)
		if err := os.Remove(exe); err != nil {
			t.Fatal(err)
		}
		fifo := exe + " (deleted)"
		if err := unix.Mkfifo(fifo, 0o644); err != nil {
			t.Fatal(err)
		}
		r := startWith(t, e, Config{PIDs: []int{p.PID}}, Deps{noMapFiles: !mapFiles})
		// Runs before the agent's own cleanup: a tick blocked on the FIFO
		// (the bug) sees end of file, so the test fails instead of hanging.
		t.Cleanup(func() {
			if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
		})
		waitFor(t, 30*time.Second, "two cpu profiles acknowledged (is the tick blocked?)", func() bool { return r.result("cpu/ok") >= 2 })
		r.stop(t)
		got := consume(t, e)
		samples := pidSamples(got.cpu, p.PID)
		if len(samples) == 0 {
			t.Fatal("no samples of the process")
		}
		leaf := map[string]int64{}
		var total int64
		for _, s := range samples {
			if m := leafMapping(s); m != nil && m.File == fifo && !mapFiles && m.BuildID != "" {
				t.Fatalf("deleted executable given build ID %s through its path", m.BuildID)
			}
			leaf[leafFunction(s, got.debuginfo)] += s.Value[0]
			total += s.Value[0]
		}
		if mapFiles && leaf[workload.CHotFunction]*2 < total {
			t.Fatalf("%s holds %d of %d samples; leaves: %v", workload.CHotFunction, leaf[workload.CHotFunction], total, leaf)
		}
		t.Logf("leaves: %v", leaf)
	})
}

// TestRewrittenBinary rewrites an executable in place once its first
// process exited: the same device and inode now hold another program, as
// when an inode number is reused. The second process's frames must carry the
// new build ID and resolve through its own debuginfo.
func TestRewrittenBinary(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	exe := workload.BuildC(t, dir, "rewritten", false)
	before := inodeOf(t, exe)
	r := start(t, e, Config{Comm: "^rewritten$"})
	first := workload.Start(t, exe, 0)
	waitFor(t, 30*time.Second, "debuginfo of the first program", func() bool { return r.result("debuginfo/ok") >= 1 && r.result("cpu/ok") >= 1 })
	first.Cmd.Process.Kill()
	first.Cmd.Wait()

	goExe := workload.BuildGo(t, t.TempDir(), "rewritten", true)
	content, err := os.ReadFile(goExe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, content, 0o755); err != nil { // O_TRUNC: same inode
		t.Fatal(err)
	}
	if inodeOf(t, exe) != before {
		t.Fatal("rewriting changed the inode")
	}
	d, err := elfinfo.Extract(exe)
	if err != nil {
		t.Fatal(err)
	}
	second := workload.Start(t, exe, 0)
	t.Logf("first pid %d, second pid %d", first.PID, second.PID)
	waitFor(t, 30*time.Second, "debuginfo of the second program", func() bool { return r.result("debuginfo/ok") >= 2 })
	time.Sleep(2 * time.Second)
	r.stop(t)
	got := consume(t, e)
	samples := pidSamples(got.cpu, second.PID)
	if len(samples) == 0 {
		t.Fatal("no samples of the second program")
	}
	var hot, total int64
	leaves := map[string]int64{}
	for _, s := range samples {
		leaves[leafFunction(s, got.debuginfo)] += s.Value[0]
		if m := leafMapping(s); m != nil && m.File == exe && m.BuildID != d.BuildID {
			t.Fatalf("second program's frames carry build ID %s, its file's is %s", m.BuildID, d.BuildID)
		}
		if leafFunction(s, got.debuginfo) == workload.GoHotFunction {
			hot += s.Value[0]
		}
		total += s.Value[0]
	}
	if hot*2 < total {
		t.Fatalf("%s holds %d of %d samples; leaves %v", workload.GoHotFunction, hot, total, leaves)
	}
}

func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// fileAgent is an agent without a sampler, to drive its /proc and
// debuginfo steps one at a time against the real broker.
func fileAgent(t *testing.T, e env, mapFiles bool) (*Agent, *prometheus.Registry, *publish.Publisher) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cl, err := kafka.NewClient(context.Background(), kafka.Config{Brokers: e.brokers, DialTimeout: 10 * time.Second},
		publish.Opts(publish.Config{BufferRecords: 100, BufferBytes: 64 << 20}, e.topics.Debuginfo)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	reg := prometheus.NewRegistry()
	pub := publish.New(cl, log, publish.NewMetrics(reg), publish.DefaultHold)
	targets, err := proc.NewTargets(nil, nil, nil, "", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{
		cfg: Config{HostID: "test-host"},
		d:   Deps{Log: log, Registry: reg, Publisher: pub, Topics: e.topics, Now: time.Now},
		m:   newMetrics(reg), known: map[string]bool{},
		ps: newProcesses(proc.FS{Root: "/proc"}, targets, newFileGate(5*time.Second, time.Now)),
	}
	a.ps.mapFiles = mapFiles
	return a, reg, pub
}

// TestSwapBeforeExtraction replaces a running program's file with another
// program between reading its build ID and reading its symbols: the symbols
// published under that build ID must be the mapped program's, or none.
func TestSwapBeforeExtraction(t *testing.T) {
	accessModes(t, func(t *testing.T, mapFiles bool) {
		e := newEnv(t)
		a, reg, pub := fileAgent(t, e, mapFiles)
		exe := workload.BuildC(t, t.TempDir(), "swapped", false)
		p := workload.Start(t, exe, 0)
		// The kernel maps the program's segments after execve has returned
		// to the parent.
		waitFor(t, 30*time.Second, "program mapped", func() bool {
			maps, _ := proc.FS{Root: "/proc"}.ReadMaps(p.PID)
			for _, m := range maps {
				if m.Path == exe {
					return true
				}
			}
			return false
		})
		pr := a.ps.get(p.PID, "swapped")
		a.ps.readMaps(pr)
		var b *binary
		for _, m := range pr.maps {
			if m.Path == exe && m.file != nil {
				b = m.file
			}
		}
		if b == nil || b.buildID == "" {
			t.Fatalf("no build ID read for %s: %+v", exe, b)
		}
		other := workload.BuildGo(t, t.TempDir(), "other", true)
		if err := os.Rename(other, exe); err != nil {
			t.Fatal(err)
		}
		a.publishDebuginfo(b)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := pub.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got := consume(t, e) // fails on a value whose build ID is not its key
		d := got.debuginfo[b.buildID]
		if !mapFiles {
			if d != nil {
				t.Fatalf("published %d symbols for %s read through a path that leads elsewhere now", len(d.Symbols), b.buildID)
			}
			if n := counterValue(t, reg, "stackstream_agent_debuginfo_total"); n != 1 {
				t.Fatalf("debuginfo counter %v, want 1 error", n)
			}
			return
		}
		if d == nil {
			t.Fatalf("no debuginfo for %s through map_files", b.buildID)
		}
		found := false
		for _, s := range d.Symbols {
			found = found || s.Name == workload.CHotFunction
		}
		if !found {
			t.Fatalf("debuginfo of %s lacks %s: not the mapped program's", b.buildID, workload.CHotFunction)
		}
	})
}

// TestFileGate blocks a read the way a FUSE server that never answers does:
// the caller gets ErrFileTimeout, the device is skipped afterwards, and
// once maxStuck reads are blocked no more are started.
func TestFileGate(t *testing.T) {
	now := time.Unix(1000, 0)
	g := newFileGate(50*time.Millisecond, func() time.Time { return now })
	release := make(chan struct{})
	defer close(release)
	block := func() { <-release }
	if err := g.do("0:50", block); !errors.Is(err, ErrFileTimeout) {
		t.Fatalf("blocked read: %v, want ErrFileTimeout", err)
	}
	if err := g.do("0:50", func() {}); !errors.Is(err, ErrSlowDevice) {
		t.Fatalf("read on the device that timed out: %v, want ErrSlowDevice", err)
	}
	if err := g.do("0:51", block); !errors.Is(err, ErrFileTimeout) {
		t.Fatalf("second blocked read: %v, want ErrFileTimeout", err)
	}
	if err := g.do("0:52", func() {}); !errors.Is(err, ErrFilesStuck) {
		t.Fatalf("read with %d reads blocked: %v, want ErrFilesStuck", g.maxStuck, err)
	}
	now = now.Add(g.slowFor + time.Second)
	done := false
	release <- struct{}{}
	release <- struct{}{}
	waitFor(t, 10*time.Second, "blocked reads released", func() bool { return g.stuck.Load() == 0 })
	if err := g.do("0:50", func() { done = true }); err != nil || !done {
		t.Fatalf("read after the device's pause and the release: %v, ran %v", err, done)
	}
}

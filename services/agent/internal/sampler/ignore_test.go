package sampler

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
)

// TestIgnoredMarks checks, on the real kernel, what the BPF program marks
// for processes the agent ignores (sampler.Ignore): a busy process sampled
// at 199 Hz is marked within milliseconds unless it is ignored, so "no mark
// for half a second" cannot pass by chance.
//   - ignored until its exec: no mark at its samples; its exec marks it
//     (Exec) and takes it out of the set (its samples mark it again);
//   - sticky (targeting by cgroup alone): no mark at its samples, its exec,
//     nor for the busy child it forks; moving the child to another cgroup
//     marks it (Exec) and takes it out.
//
// Every wait also checks that the ring buffer woke Marked.
func TestIgnoredMarks(t *testing.T) {
	testenv.Root(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := New(log, Config{Frequency: 199, CountsSize: 4096, StacksSize: 4096,
		UnwindTableBytes: 1 << 20, UnwindMappings: 1024, UnwindProcesses: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dir := t.TempDir()
	goFile := filepath.Join(dir, "go")
	start := func(script string) *exec.Cmd {
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = append(os.Environ(), "GO="+goFile)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its children stop with it
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
		return cmd
	}
	// wait returns the first mark of a pid in pids within d (nil: none), the
	// marks of other processes dropped.
	wait := func(d time.Duration, pids ...int) *Stale {
		t.Helper()
		end := time.After(d)
		for {
			select {
			case <-s.Marked():
			case <-time.After(50 * time.Millisecond):
			case <-end:
				return nil
			}
			for _, st := range s.Refresh() {
				for _, p := range pids {
					if st.PID == p {
						return &st
					}
				}
			}
		}
	}
	// sampled waits for a mark of pid's samples (its exec's may come first).
	sampled := func(pid int) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
			if st := wait(time.Second, pid); st != nil && st.Sampled {
				return
			}
		}
		t.Fatalf("busy pid %d: no mark for its samples", pid)
	}
	touch := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("until exec", func(t *testing.T) {
		cmd := start(`while [ ! -e "$GO.1" ]; do :; done; exec sh -c 'while :; do :; done'`)
		pid := cmd.Process.Pid
		sampled(pid)
		if !s.Ignore(pid, false) {
			t.Fatal("Ignore refused")
		}
		wait(50*time.Millisecond, pid) // a sample between the Refresh and Ignore
		if st := wait(500*time.Millisecond, pid); st != nil {
			t.Fatalf("ignored pid %d marked: %+v", pid, st)
		}
		touch("go.1")
		if st := wait(5*time.Second, pid); st == nil || !st.Exec {
			t.Fatalf("ignored pid %d exec'd: mark %+v, want Exec", pid, st)
		}
		sampled(pid) // no longer ignored
	})

	t.Run("sticky", func(t *testing.T) {
		cmd := start(`while [ ! -e "$GO.2" ]; do :; done; exec sh -c 'while [ ! -e "$GO.3" ]; do :; done; (while :; do :; done) & wait'`)
		pid := cmd.Process.Pid
		sampled(pid)
		if !s.Ignore(pid, true) {
			t.Fatal("Ignore refused")
		}
		wait(50*time.Millisecond, pid)
		touch("go.2") // exec
		if st := wait(500*time.Millisecond, pid); st != nil {
			t.Fatalf("sticky-ignored pid %d marked (exec, samples): %+v", pid, st)
		}
		touch("go.3") // fork of a busy child
		var child int
		for end := time.Now().Add(5 * time.Second); child == 0 && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
			if f := strings.Fields(string(b)); len(f) > 0 {
				child, _ = strconv.Atoi(f[0])
			}
		}
		if child == 0 {
			t.Fatal("no child forked")
		}
		if st := wait(500*time.Millisecond, pid, child); st != nil {
			t.Fatalf("sticky-ignored pid %d or its child %d marked: %+v", pid, child, st)
		}
		moveToCgroup(t, child)
		if st := wait(5*time.Second, child); st == nil || !st.Exec {
			t.Fatalf("child %d moved to another cgroup: mark %+v, want Exec (identity changed)", child, st)
		}
		sampled(child) // no longer ignored
	})
}

// moveToCgroup moves pid into a new cgroup of the hierarchy systemd's units
// live in (the named v1 one, or v2), and back out at the end.
func moveToCgroup(t *testing.T, pid int) {
	t.Helper()
	root := "/sys/fs/cgroup/systemd"
	if _, err := os.Stat(root + "/cgroup.procs"); err != nil {
		root = "/sys/fs/cgroup"
	}
	dir := filepath.Join(root, fmt.Sprintf("stackstream-ignore-test-%d.scope", os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		os.Remove(dir)
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("move pid %d into %s: %v", pid, dir, err)
	}
}

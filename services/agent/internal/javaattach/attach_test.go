package javaattach

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

var testOptions = Options{ProcRoot: "/proc", Wait: 10 * time.Second, Timeout: 10 * time.Second, Poll: 50 * time.Millisecond}

func target(t *testing.T, pid int) Target {
	t.Helper()
	fs := proc.FS{Root: "/proc"}
	st, err := fs.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	status, err := fs.ReadStatus(pid)
	if err != nil {
		t.Fatal(err)
	}
	return Target{PID: pid, StartTime: st.StartTime, Status: status}
}

// TestPerfMap: a JVM started without any flag writes its perf map when
// asked through the attach mechanism, as root and as an unprivileged user
// (the agent connects with the JVM's credentials), twice (the second time
// the listener is already up: no signal).
func TestPerfMap(t *testing.T) {
	testenv.Root(t)
	for _, c := range []struct {
		name string
		home string
		uid  uint32
		need bool
	}{
		{"jdk17_root", workload.JDK17, 0, true},
		{"jdk17_nobody", workload.JDK17, workload.Nobody, true},
		{"jdk25_nobody", workload.JDK25, workload.Nobody, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.home); err != nil && !c.need {
				t.Skipf("%s: %v", c.home, err)
			}
			cmd := workload.StartJava(t, c.home, c.uid)
			pid := cmd.Process.Pid
			// The JVM handles SIGQUIT once started; before, the signal
			// would kill it.
			if !workload.WaitFor(20*time.Second, func() bool {
				s, err := proc.FS{Root: "/proc"}.ReadStatus(pid)
				return err == nil && s.Catches(3)
			}) {
				t.Fatal("the JVM never handled SIGQUIT")
			}
			time.Sleep(time.Second) // hotJavaMethod compiled
			perfMap := fmt.Sprintf("/proc/%d/root/tmp/perf-%d.map", pid, pid)
			for i := range 2 {
				os.Remove(perfMap)
				out, err := PerfMap(context.Background(), target(t, pid), testOptions)
				if err != nil {
					t.Fatalf("attempt %d: %v (output %q)", i, err, out)
				}
				b, err := os.ReadFile(perfMap)
				if err != nil {
					t.Fatalf("attempt %d: %v", i, err)
				}
				if !strings.Contains(string(b), "Hot."+workload.JavaHotMethod) {
					t.Fatalf("attempt %d: %d bytes of perf map without Hot.%s", i, len(b), workload.JavaHotMethod)
				}
				fi, _ := os.Stat(perfMap)
				t.Logf("attempt %d: %d bytes, %d lines, owner %d", i, len(b), strings.Count(string(b), "\n"), ownerOf(fi))
			}
			if _, err := os.Stat(fmt.Sprintf("/tmp/.attach_pid%d", pid)); err == nil {
				t.Error("the attach file was left behind")
			}
		})
	}
}

// TestNoHandler: a process without a SIGQUIT handler is not signalled (the
// default action would kill it).
func TestNoHandler(t *testing.T) {
	testenv.Root(t)
	cmd := workload.StartNode(t) // no SIGQUIT handler, no attach socket
	time.Sleep(200 * time.Millisecond)
	_, err := PerfMap(context.Background(), target(t, cmd.Process.Pid), testOptions)
	if err == nil || !strings.Contains(err.Error(), ErrNoHandler.Error()) {
		t.Fatalf("err %v, want ErrNoHandler", err)
	}
	if cmd.ProcessState != nil {
		t.Fatal("the process exited")
	}
}

package agent

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
)

// TestUnwindRowsRefused: in a memory cgroup of 384 MiB, an agent asking for
// 1 GiB of unwind rows is refused them by the kernel (the array is charged
// to the cgroup when the program is loaded). It warns, walks user stacks with
// frame pointers and still publishes the target's samples. The agent runs
// in a child test process placed in the cgroup before it starts.
func TestUnwindRowsRefused(t *testing.T) {
	if os.Getenv("STACKSTREAM_TEST_MEMCG_CHILD") == "1" {
		rowsRefusedChild(t)
		return
	}
	testenv.Root(t)
	procs := memoryCgroup(t, 384<<20)
	cmd := exec.Command("sh", "-c", `echo $$ >"$1" && shift && exec "$@"`, "sh", procs,
		os.Args[0], "-test.run=^TestUnwindRowsRefused$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "STACKSTREAM_TEST_MEMCG_CHILD=1")
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", lastLines(string(out), 15))
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !strings.Contains(string(out), "unwind tables refused") || !strings.Contains(string(out), "--- PASS: TestUnwindRowsRefused") {
		t.Fatal("the child did not warn that the unwind tables were refused, or did not pass")
	}
}

func rowsRefusedChild(t *testing.T) {
	e := newEnv(t)
	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { busy.Process.Kill(); busy.Wait() }()
	a := start(t, e, Config{PIDs: []int{busy.Process.Pid}, UnwindTableBytes: 1 << 30, UnwindMappings: 4096, UnwindProcesses: 64})
	if a.unwind != nil || a.cfg.UnwindTableBytes != 0 {
		t.Fatalf("1 GiB of rows in a 384 MiB cgroup was not refused: unwinder %v, table bytes %d", a.unwind != nil, a.cfg.UnwindTableBytes)
	}
	time.Sleep(2500 * time.Millisecond)
	a.stop(t)
	got := consume(t, e)
	samples := pidSamples(got.cpu, busy.Process.Pid)
	var n int64
	for _, s := range samples {
		n += s.Value[0]
	}
	t.Logf("%d samples of the target with frame pointers", n)
	if n < 20 {
		t.Fatalf("%d samples of the target published", n)
	}
}

// memoryCgroup makes a memory cgroup limited to limit bytes under the test's
// own (v1 memory hierarchy or v2) and returns its cgroup.procs. Under CI,
// no cgroup to make fails the test.
func memoryCgroup(t *testing.T, limit int64) string {
	t.Helper()
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var dir, limitFile string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[1] == "memory":
			dir, limitFile = filepath.Join("/sys/fs/cgroup/memory", parts[2]), "memory.limit_in_bytes"
		case parts[0] == "0" && parts[1] == "" && dir == "":
			if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
				dir, limitFile = filepath.Join("/sys/fs/cgroup", parts[2]), "memory.max"
			}
		}
	}
	cg := filepath.Join(dir, fmt.Sprintf("stackstream-memcg-test-%d", os.Getpid()))
	if dir == "" || os.Mkdir(cg, 0o755) != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no memory cgroup to make under %q", dir)
		}
		t.Skipf("no memory cgroup to make under %q", dir)
	}
	t.Cleanup(func() {
		// Its processes have exited; an empty cgroup is removed with rmdir.
		for i := 0; i < 50 && os.Remove(cg) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	})
	if err := os.WriteFile(filepath.Join(cg, limitFile), []byte(fmt.Sprint(limit)), 0o644); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("limit %s: %v", cg, err)
		}
		t.Skipf("limit %s: %v", cg, err)
	}
	return filepath.Join(cg, "cgroup.procs")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

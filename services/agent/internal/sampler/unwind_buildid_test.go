package sampler

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/unwind"
)

// TestUnwindSharedBuildID: two copies of one binary at different paths
// (other inodes, one build ID) run at once; their table is loaded once and
// both are unwound from the root.
func TestUnwindSharedBuildID(t *testing.T) {
	testenv.Root(t)
	bin := buildC(t, chainC)
	var bins []string
	for _, d := range []string{t.TempDir(), t.TempDir()} {
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(d, "prog")
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
		bins = append(bins, dst)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := New(log, Config{Frequency: 199, CountsSize: 4096, StacksSize: 4096,
		UnwindTableBytes: 16 << 20, UnwindMappings: 4096, UnwindProcesses: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	reg := unwind.NewRegistry(log, proc.FS{Root: "/proc"}, s, unwind.DefaultLimits)
	var pids []int
	var stats []unwind.RegistryStats
	for _, b := range bins {
		cmd := exec.Command(b, "5000")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		time.Sleep(100 * time.Millisecond) // the dynamic loader maps libc
		if err := reg.AddProcess(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, cmd.Process.Pid)
		stats = append(stats, reg.Stats())
	}
	t.Logf("registry after the first copy %+v, after the second %+v", stats[0], stats[1])
	// prog, libc, ld.so, the vDSO.
	if stats[0].Tables != 4 || stats[1].Tables != 4 || stats[1].RowBytes != stats[0].RowBytes || stats[1].Processes != 2 {
		t.Fatalf("the second copy loaded tables: %+v then %+v", stats[0], stats[1])
	}
	s.Drain()
	// About 100 samples each at 199 Hz.
	sampleWindow(t, 2*time.Second, 500*time.Millisecond, func() {}, pids...)
	samples, _, err := s.Drain()
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		sym := newSymbolizer(t, pid)
		var stacks [][]string
		var counts []uint64
		for _, smp := range samples {
			if smp.PID != pid {
				continue
			}
			var st []string
			for i, pc := range smp.User {
				if i > 0 {
					pc--
				}
				st = append(st, sym.name(pc))
			}
			stacks = append(stacks, st)
			counts = append(counts, smp.Count)
		}
		share, depth, total := summarize(stacks, counts)
		t.Logf("pid %d: %d samples, %.1f%% complete, median depth %d", pid, total, 100*share, depth)
		if total < 50 {
			t.Fatalf("pid %d: only %d samples", pid, total)
		}
		if exact := exactChain(t, stacks, counts, total); exact*100 < total*99 {
			t.Fatalf("pid %d: %d of %d samples have leaf <- b <- a <- main <- libc <- _start", pid, exact, total)
		}
	}
}

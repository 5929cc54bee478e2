package sampler

import (
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/unwind"
)

// TestUnwindDeferredTables: a process registered with its new tables put
// off (Prepare's deferNew, as the agent registers a program at its exec,
// before any sample) has the files left out stepped with frame pointers:
// the BPF program counts them (unwind_no_mapping) and marks the process
// (Stale.Miss). Registered again with its tables built, as the agent does
// for a marked process, every sample has the whole chain.
func TestUnwindDeferredTables(t *testing.T) {
	testenv.Root(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := New(log, Config{Frequency: 199, CountsSize: 4096, StacksSize: 4096,
		UnwindTableBytes: 16 << 20, UnwindMappings: 4096, UnwindProcesses: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cmd := exec.Command(buildC(t, chainC), "5000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	time.Sleep(100 * time.Millisecond) // ld.so maps libc
	reg := unwind.NewRegistry(log, proc.FS{Root: "/proc"}, s, unwind.DefaultLimits)
	p, err := reg.Prepare(pid, true, true)
	if err != nil {
		t.Fatal(err)
	}
	// The program, libc and ld.so; the vDSO's table is the agent's own.
	if p.Deferred != 3 || p.Compiled != 0 {
		t.Fatalf("prepared with deferNew: %d deferred, %d compiled", p.Deferred, p.Compiled)
	}
	if err := reg.Commit(p); err != nil {
		t.Fatal(err)
	}
	s.Refresh() // marks of samples before the registration
	before, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	miss := false
	for end := time.Now().Add(3 * time.Second); !miss && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, st := range s.Refresh() {
			miss = miss || st.PID == pid && st.Miss
		}
	}
	after, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("deferred: marked %v, unwind_no_mapping %d -> %d", miss, before.UnwindNoMapping, after.UnwindNoMapping)
	if !miss || after.UnwindNoMapping == before.UnwindNoMapping {
		t.Fatalf("a sample in a deferred mapping: marked %v, unwind_no_mapping %d -> %d", miss, before.UnwindNoMapping, after.UnwindNoMapping)
	}
	if err := reg.AddProcess(pid); err != nil {
		t.Fatal(err)
	}
	if st := reg.Stats(); st.Tables != 4 {
		t.Fatalf("after the registration that builds: %+v", st)
	}
	if _, _, err := s.Drain(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	samples, _, err := s.Drain()
	if err != nil {
		t.Fatal(err)
	}
	sym := newSymbolizer(t, pid)
	var stacks [][]string
	var counts []uint64
	var total uint64
	for _, smp := range samples {
		if smp.PID != pid {
			continue
		}
		var st []string
		for i, pc := range smp.User {
			if i > 0 {
				pc-- // a return address follows its call
			}
			st = append(st, sym.name(pc))
		}
		stacks = append(stacks, st)
		counts = append(counts, smp.Count)
		total += smp.Count
	}
	if total < 50 {
		t.Fatalf("only %d samples", total)
	}
	if exact := exactChain(t, stacks, counts, total); exact*100 < total*99 {
		t.Fatalf("%d of %d samples have leaf <- b <- a <- main <- libc <- _start once built", exact, total)
	}
	reg.RemoveProcess(pid)
}

package sampler

import (
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/unwind"
)

// langWorkload is a run of a language runtime under the sampler: its
// native tables registered as the agent does, and its runtime's state
// through register (called again whenever the BPF program marks the
// process stale: an exec, new mappings).
type langWorkload struct {
	cmd   *exec.Cmd
	table int // UnwindTableBytes
	maps  int // UnwindMappings
	// warm: from start to the first registration (the runtime loading);
	// settle: registrations before the measured span.
	warm, settle, span time.Duration
	register           func(s *Sampler, fs proc.FS, pid int)
	remove             func(s *Sampler, pid int)
	// stack names a sample's user frames, innermost first; ok false
	// leaves the sample out. It runs while the process is alive.
	stack func(smp Sample, sym *symbolizer) (st []string, ok bool)
}

// run samples w for its span and returns its stacks with their counts, the
// sampler's counters and the BPF program's mean run time per sample over
// the host's samples during the span.
func (w langWorkload) run(t testing.TB) (stacks [][]string, counts []uint64, c Counters, nsPerSample float64) {
	t.Helper()
	testenv.Root(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := New(log, Config{Frequency: 199, CountsSize: 4096, StacksSize: 4096,
		UnwindTableBytes: w.table, UnwindMappings: w.maps, UnwindProcesses: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { w.cmd.Process.Kill(); w.cmd.Wait() }()
	pid := w.cmd.Process.Pid
	time.Sleep(w.warm)
	fs := proc.FS{Root: "/proc"}
	reg := unwind.NewRegistry(log, fs, s, unwind.DefaultLimits)
	register := func() {
		if err := reg.AddProcess(pid); err != nil {
			t.Fatal(err)
		}
		w.register(s, fs, pid)
	}
	register()
	poll := func() {
		for _, st := range s.Refresh() {
			if st.PID == pid {
				register()
			}
		}
	}
	sampleWindow(t, w.settle, 0, poll)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	s.Drain()
	before, err := s.objs.ProfileCpu.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// 50 samples a second of the span at 199 Hz.
	sampleWindow(t, w.span, w.span/4, poll, pid)
	after, err := s.objs.ProfileCpu.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if runs := after.RunCount - before.RunCount; runs > 0 {
		nsPerSample = float64(after.Runtime-before.Runtime) / float64(runs)
	}
	samples, _, err := s.Drain()
	if err != nil {
		t.Fatal(err)
	}
	sym := newSymbolizer(t, pid)
	for _, smp := range samples {
		if smp.PID != pid {
			continue
		}
		if st, ok := w.stack(smp, sym); ok {
			stacks = append(stacks, st)
			counts = append(counts, smp.Count)
		}
	}
	if c, err = s.Counters(); err != nil {
		t.Fatal(err)
	}
	w.remove(s, pid)
	reg.RemoveProcess(pid)
	return stacks, counts, c, nsPerSample
}

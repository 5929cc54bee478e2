package sampler

import (
	"github.com/stackstream/stackstream/bpf/profiler"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
)

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in   string
		want int
		bad  bool
	}{
		{"0", 1, false},
		{"0-3\n", 4, false},
		{"0-1,4,6-7", 5, false},
		{"", 0, true},
		{"3-1", 0, true},
		{"x", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseCPUList(tt.in)
			if (err != nil) != tt.bad || len(got) != tt.want {
				t.Fatalf("ParseCPUList(%q) = %v, %v", tt.in, got, err)
			}
		})
	}
}

// TestSamplesBusyProcess runs the real program in the kernel against a busy
// shell loop and checks its samples carry its pid, comm and stacks.
func TestSamplesBusyProcess(t *testing.T) {
	testenv.Root(t)
	s, err := New(slog.New(slog.NewTextHandler(os.Stderr, nil)), Config{Frequency: 99, CountsSize: 4096, StacksSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// About 40 samples at 99 Hz.
	sampleWindow(t, time.Second, 400*time.Millisecond, func() {}, cmd.Process.Pid)
	var mine, total uint64
	var withUser bool
	for range 2 {
		samples, _, err := s.Drain()
		if err != nil {
			t.Fatal(err)
		}
		for _, smp := range samples {
			total += smp.Count
			if smp.PID == cmd.Process.Pid {
				mine += smp.Count
				if smp.Comm != "sh" {
					t.Errorf("comm = %q, want sh", smp.Comm)
				}
				if len(smp.User) > 0 {
					withUser = true
				}
				if smp.PeriodNanos != smp.Count*uint64(time.Second/99) {
					t.Errorf("period %d ns for %d samples, want 1e9/99 each", smp.PeriodNanos, smp.Count)
				}
			}
		}
	}
	if mine < 20 || !withUser {
		t.Fatalf("busy loop got %d of %d samples (with user stack: %v)", mine, total, withUser)
	}
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Samples < mine {
		t.Fatalf("counters %+v below drained %d", c, mine)
	}
	t.Logf("busy loop %d samples of %d, counters %+v", mine, total, c)
}

// TestCountsMapFull sizes the counts map far below what a busy host needs:
// lost samples are counted, and the orphaned stacks they leave are cleared
// so the stack map does not fill up.
func TestCountsMapFull(t *testing.T) {
	testenv.Root(t)
	s, err := New(slog.New(slog.NewTextHandler(os.Stderr, nil)), Config{Frequency: 999, CountsSize: 2, StacksSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 2 {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		_ = i
	}
	var stored int
	for range 3 {
		time.Sleep(300 * time.Millisecond)
		samples, n, err := s.Drain()
		if err != nil {
			t.Fatal(err)
		}
		if n > 2 {
			t.Fatalf("%d keys in a 2-entry map", n)
		}
		stored += len(samples)
	}
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.CountsFull == 0 {
		t.Fatalf("no lost samples counted with a 2-entry counts map: %+v", c)
	}
	// The generation just drained holds no stack: not even those of the
	// samples that found no room in the counts map.
	s.Drain()
	idle := s.objs.Stacks0
	if s.gen == 0 {
		idle = s.objs.Stacks1
	}
	var id uint32
	var frames [profiler.MaxStackDepth]uint64
	left := 0
	for it := idle.Iterate(); it.Next(&id, &frames); {
		left++
	}
	// A program that read the generation just before the flip may still
	// have added one or two.
	if left > 2 {
		t.Fatalf("%d stacks left in the drained generation", left)
	}
	t.Logf("stored %d keys, counters %+v", stored, c)
}

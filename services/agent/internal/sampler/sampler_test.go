package sampler

import (
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
	time.Sleep(time.Second)
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

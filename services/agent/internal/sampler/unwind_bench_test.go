package sampler

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/unwind"
)

// BenchmarkBPFRunTime samples the host at 999 Hz for 3 s while xz -9e runs
// and reports the BPF program's mean run time per sample (kernel BPF stats:
// every sample on the host, xz's among them) with xz registered (tables)
// and not (the kernel's frame-pointer walk), and the median depth of xz's
// user stacks. b.N is not used: the figures are per sample.
func BenchmarkBPFRunTime(b *testing.B) {
	testenv.Root(b)
	in := filepath.Join(b.TempDir(), "in")
	data, err := os.ReadFile("/usr/bin/xz")
	if err != nil {
		b.Fatal(err)
	}
	for len(data) < 64<<20 {
		data = append(data, data...)
	}
	if err := os.WriteFile(in, data, 0o644); err != nil {
		b.Fatal(err)
	}
	for _, tables := range []bool{false, true} {
		name := "frame-pointers"
		if tables {
			name = "tables"
		}
		b.Run(name, func(b *testing.B) {
			stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
			if err != nil {
				b.Fatal(err)
			}
			defer stats.Close()
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			s, err := New(log, Config{Frequency: 999, CountsSize: 16384, StacksSize: 16384,
				UnwindTableBytes: 16 << 20, UnwindMappings: 4096, UnwindProcesses: 64})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			cmd := exec.Command("sh", "-c", "exec xz -9e -T1 -c "+in+" > /dev/null")
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			time.Sleep(100 * time.Millisecond)
			if tables {
				reg := unwind.NewRegistry(log, proc.FS{Root: "/proc"}, s, unwind.DefaultLimits)
				if err := reg.AddProcess(cmd.Process.Pid); err != nil {
					b.Fatal(err)
				}
			}
			s.Drain()
			before, err := s.objs.ProfileCpu.Stats()
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
			}
			time.Sleep(3 * time.Second)
			after, err := s.objs.ProfileCpu.Stats()
			if err != nil {
				b.Fatal(err)
			}
			samples, _, err := s.Drain()
			if err != nil {
				b.Fatal(err)
			}
			var depths []int
			for _, smp := range samples {
				if smp.PID == cmd.Process.Pid {
					for range smp.Count {
						depths = append(depths, len(smp.User))
					}
				}
			}
			runs := after.RunCount - before.RunCount
			if runs == 0 || len(depths) == 0 {
				b.Fatalf("%d runs, %d samples of xz", runs, len(depths))
			}
			b.ReportMetric(float64(after.Runtime-before.Runtime)/float64(runs), "bpf-ns/sample")
			b.ReportMetric(float64(medianInt(depths)), "median-depth")
		})
	}
}

func medianInt(v []int) int {
	s := append([]int(nil), v...)
	sort.Ints(s)
	return s[len(s)/2]
}

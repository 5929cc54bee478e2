package agent

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// sleeperC: blocker <- worker <- main, sleeping 20 ms at a time, built
// -O2 -fomit-frame-pointer: only the tables find worker and main.
const sleeperC = `
#include <time.h>
__attribute__((noinline, noipa)) void blocker(void) { struct timespec d = { 0, 20000000 }; nanosleep(&d, 0); }
__attribute__((noinline, noipa)) void worker(void) { for (;;) blocker(); }
int main(void) { worker(); return 0; }
`

// TestOffCPUProfile: with off-CPU profiling on, the agent publishes offcpu
// profiles through Kafka in which a program that sleeps almost all the time
// shows blocker <- worker <- main <- ... <- _start, with the kernel's
// nanosleep under it (the tracepoint's own frames trimmed), and its blocked
// time is its wall-clock time: within sampling error (probability 0.5, about
// 100 blocks a profile) of the profiles' durations.
func TestOffCPUProfile(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "sleeper.c")
	if err := os.WriteFile(src, []byte(sleeperC), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sleeper")
	if out, err := exec.Command("gcc", "-O2", "-fomit-frame-pointer", "-Wl,--build-id", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	time.Sleep(100 * time.Millisecond)

	a := start(t, e, Config{PIDs: []int{cmd.Process.Pid}, UnwindTableBytes: 16 << 20, UnwindMappings: 4096, UnwindProcesses: 64,
		OffCPUProbability: 0.5, OffCPUThreads: 1024})
	time.Sleep(4500 * time.Millisecond)
	families, err := a.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	a.stop(t)
	metrics := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			if len(m.GetLabel()) > 0 {
				name += "/" + m.GetLabel()[0].GetValue()
			}
			metrics[name] += value(m)
		}
	}
	for _, name := range []string{"stackstream_agent_offcpu_blocks_total", "stackstream_agent_offcpu_nanoseconds_total",
		"stackstream_agent_bpf_events/offcpu_recorded", "stackstream_agent_bpf_events/offcpu_blocks"} {
		if metrics[name] <= 0 {
			t.Errorf("metric %s = %v", name, metrics[name])
		}
	}

	got := consume(t, e)
	if len(got.offcpu) < 4 {
		t.Fatalf("%d offcpu profiles", len(got.offcpu))
	}
	for _, p := range got.offcpu {
		if len(p.SampleType) != 2 || p.SampleType[1].Type != "offcpu" || p.SampleType[1].Unit != "nanoseconds" || p.DefaultSampleType != "offcpu" {
			t.Fatalf("offcpu profile sample types %v, default %q", p.SampleType, p.DefaultSampleType)
		}
	}
	// From the third interval on, the process is registered (the end of
	// the first tick) and its blocks started after that.
	var wall, blocked, exact float64
	for _, p := range got.offcpu[2:] {
		wall += float64(p.DurationNanos)
		for _, s := range pidSamples([]*profile.Profile{p}, cmd.Process.Pid) {
			st := stackFunctions(s, got.debuginfo)
			var kernel []string
			for _, loc := range s.Location {
				if loc.Mapping != nil && loc.Mapping.File == kernelMappingFile && len(loc.Line) > 0 {
					kernel = append(kernel, loc.Line[0].Function.Name)
				}
			}
			blocked += float64(s.Value[1])
			i := 0
			for i < len(st) && !strings.HasPrefix(st[i], "sleeper:") {
				i++ // libc's nanosleep
			}
			if i+3 <= len(st) && strings.Join(st[i:i+3], " ") == "sleeper:blocker sleeper:worker sleeper:main" && st[len(st)-1] == "sleeper:_start" &&
				len(kernel) > 0 && strings.Contains(strings.Join(kernel, " "), "nanosleep") && !strings.HasPrefix(kernel[0], "bpf_") {
				exact += float64(s.Value[1])
			} else {
				t.Logf("%d blocks, %d ns: %s | kernel %s", s.Value[0], s.Value[1], strings.Join(st, " <- "), strings.Join(kernel, " <- "))
			}
		}
	}
	t.Logf("blocked %.0f ns in %.0f ns of profiles, %.0f ns with the complete chain", blocked, wall, exact)
	if blocked < 0.6*wall || blocked > 1.4*wall {
		t.Errorf("blocked %.0f ns in %.0f ns of profiles: want 0.6..1.4 of it (one thread asleep all the time)", blocked, wall)
	}
	if exact < 0.95*blocked {
		t.Errorf("%.0f of %.0f ns blocked with blocker <- worker <- main <- _start over nanosleep", exact, blocked)
	}
}

// TestConfigOffCPU: bad off-CPU settings stop start-up with the variable
// named; off (probability 0) needs no other setting.
func TestConfigOffCPU(t *testing.T) {
	base := Config{Frequency: 19, Interval: 10 * time.Second, CountsMapSize: 64, StacksMapSize: 64, BufferRecords: 1, BufferBytes: 1 << 20,
		HeapMaxCompressedBytes: 1024, HeapMaxBytes: 1024, HeapMaxEntries: 16, HeapTimeout: time.Second, FileTimeout: time.Second, DebuginfoHold: time.Second,
		Kubernetes: "off", OffCPUProbability: 0.01, OffCPUThreads: 16384}
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // in the error; "" for none
	}{
		{"default", func(*Config) {}, ""},
		{"off", func(c *Config) { c.OffCPUProbability, c.OffCPUThreads = 0, 0 }, ""},
		{"every switch", func(c *Config) { c.OffCPUProbability = 1 }, ""},
		{"negative", func(c *Config) { c.OffCPUProbability = -0.1 }, "STACKSTREAM_AGENT_OFFCPU_PROBABILITY"},
		{"above one", func(c *Config) { c.OffCPUProbability = 1.5 }, "STACKSTREAM_AGENT_OFFCPU_PROBABILITY"},
		{"not a number", func(c *Config) { c.OffCPUProbability = math.NaN() }, "STACKSTREAM_AGENT_OFFCPU_PROBABILITY"},
		{"too small to apply", func(c *Config) { c.OffCPUProbability = 1e-9 }, "STACKSTREAM_AGENT_OFFCPU_PROBABILITY"},
		{"negative minimum block", func(c *Config) { c.OffCPUMinBlock = -time.Millisecond }, "STACKSTREAM_AGENT_OFFCPU_MIN_BLOCK"},
		{"too few threads", func(c *Config) { c.OffCPUThreads = 10 }, "STACKSTREAM_AGENT_OFFCPU_THREADS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.set(&c)
			err := c.Validate()
			if tc.want == "" && err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate = %v, want an error naming %s", err, tc.want)
			}
			if err == nil {
				if err := c.offCPUSampler().Validate(); err != nil && c.OffCPUProbability > 0 {
					t.Fatalf("the sampler refuses what the agent accepted: %v", err)
				}
			}
		})
	}
}

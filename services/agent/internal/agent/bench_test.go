package agent

import (
	"testing"
	"time"

	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/sampler"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

// BenchmarkBuildCPUProfile measures the user-space cost of one interval on a
// busy host: 2000 distinct (process, stack) keys from 50 processes, 20 frames
// each, built into a profile and encoded.
func BenchmarkBuildCPUProfile(b *testing.B) {
	targets, _ := proc.NewTargets(nil, nil, nil, "", -1)
	ps := newProcesses(proc.FS{Root: b.TempDir()}, targets, newFileGate(time.Second, time.Now))
	exe := &binary{path: "/usr/bin/app", buildID: "0123456789abcdef0123456789abcdef01234567"}
	for pid := 1; pid <= 50; pid++ {
		p := &process{info: proc.Info{PID: pid, StartTime: 1, Comm: "app"}, targeted: true, mapsRead: 1}
		p.labels = labelsOf(p.info)
		p.maps = []mapping{{Mapping: proc.Mapping{Start: 0x400000, Limit: 0x1400000, Path: exe.path}, file: exe}}
		ps.procs[pid] = p
	}
	var samples []sampler.Sample
	for i := range 2000 {
		s := sampler.Sample{PID: i%50 + 1, Comm: "app", Count: 3, PeriodNanos: 3 * 52631578}
		for f := range 20 {
			s.User = append(s.User, 0x400000+uint64((i*31+f*7919)%0xfffff0))
		}
		s.Kernel = []uint64{0xffffffff81000000 + uint64(i%100)*64}
		samples = append(samples, s)
	}
	for b.Loop() {
		c := newCPUProfile(ps, nil, time.Now(), 10*time.Second, 52631578)
		for _, s := range samples {
			c.add(ps.get(s.PID, s.Comm), s)
		}
		if _, err := encodeBounded(c.p, maxProfileRecordBytes); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadMaps measures what a new process costs the agent: reading its
// maps and checking each executable mapping's file off the tick goroutine:
// binaries already confirmed this interval (checked: no file access), cached
// from an earlier interval (hit: one stat each through map_files; O_PATH
// open, fstat, close through the path), or not cached (miss: opened, checked
// and their build ID read).
func BenchmarkReadMaps(b *testing.B) {
	exe := workload.BuildC(b, b.TempDir(), "benchmaps", false)
	p := workload.Start(b, exe, 0)
	targets, _ := proc.NewTargets(nil, nil, nil, "", -1)
	for _, c := range []struct {
		name     string
		mapFiles bool
		cached   bool
		checked  bool
	}{
		{"map_files/checked", true, true, true}, {"map_files/hit", true, true, false}, {"map_files/miss", true, false, false},
		{"path/checked", false, true, true}, {"path/hit", false, true, false}, {"path/miss", false, false, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			ps := newProcesses(proc.FS{Root: "/proc"}, targets, newFileGate(5*time.Second, time.Now))
			ps.mapFiles = c.mapFiles
			pr := &process{info: proc.Info{PID: p.PID, StartTime: 1}}
			files := 0
			for b.Loop() {
				if !c.cached {
					clear(ps.binaries)
				}
				if !c.checked {
					ps.interval++
				}
				pr.mapsRead = 0
				ps.readMaps(pr)
				files = 0
				for _, m := range pr.maps {
					if m.file != nil {
						files++
						if m.file.buildID == "" {
							b.Fatalf("no build ID for %s: %v", m.Path, m.file.err)
						}
					}
				}
			}
			b.ReportMetric(float64(files), "files/op")
		})
	}
}

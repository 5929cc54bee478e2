package agent

import (
	"testing"
	"time"

	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/sampler"
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

package aggregate

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// benchProfiles are realistic agent CPU profiles: a 10 s interval of one
// host with 8 services, 300 distinct stacks 12 to 40 frames deep drawn
// from 2000 functions, and process labels on every sample.
func benchProfiles(n int) []*profile.Profile {
	rng := rand.New(rand.NewPCG(1, 2))
	stacks := make([][]string, 300)
	for i := range stacks {
		depth := 12 + rng.IntN(29)
		for range depth {
			stacks[i] = append(stacks[i], fmt.Sprintf("pkg%d.(*T).fn%d", rng.IntN(50), rng.IntN(2000)))
		}
	}
	out := make([]*profile.Profile, n)
	for i := range out {
		b := pproftest.NewCPU(t0.Add(time.Duration(i)*10*time.Second), 10*time.Second)
		for s, st := range stacks {
			svc := s % 8
			labels := map[string]string{
				record.LabelService: fmt.Sprintf("svc-%d", svc), record.LabelPID: fmt.Sprint(1000 + svc),
				record.LabelComm: "worker", record.LabelExecutable: "/usr/bin/app", record.LabelSystemdUnit: "app.service",
			}
			ticks := 1 + rng.Int64N(20)
			b.Sample(labels, []int64{ticks, ticks * 52631578}, st...)
		}
		out[i] = b.Profile()
	}
	return out
}

// BenchmarkAggregate folds decoded profiles into windows and writes them as
// the consumer does (pending documents every 10 profiles, eviction, commit).
func BenchmarkAggregate(b *testing.B) {
	profs := benchProfiles(360) // one hour of one host
	cfg := Config{AllowedLateness: 2 * time.Minute, Retention: 10 * time.Minute, Names: indices.Default, Now: time.Now}
	p := NewPartition(cfg, Checkpoint{})
	docs := 0
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuTime()
	for i := 0; b.Loop(); i++ {
		prof := profs[i%len(profs)]
		if i%len(profs) == 0 && i > 0 {
			// A new hour: shift so windows keep closing.
			for _, pr := range profs {
				pr.TimeNanos += int64(time.Hour)
			}
		}
		if _, err := p.Add(Input{Profile: prof, Type: record.ProfileCPU, Host: "web-1", Offset: int64(i)}); err != nil {
			b.Fatal(err)
		}
		if i%10 == 9 {
			pending := p.Pending(false)
			docs += len(pending)
			MarkStored(pending)
			p.Evict()
			if off, cp, ok := p.Commit(); ok {
				p.Committed(off, cp)
			}
		}
	}
	reportCPU(b, start)
	b.ReportMetric(float64(docs)/float64(b.N), "docs/profile")
}

// BenchmarkDecodeAndAggregate adds decoding the pprof record value, the
// other half of the consumer's CPU work per record: gzip as agents write
// it, stored as the symbolizer writes profiles.symbolized.
func BenchmarkDecodeAndAggregate(b *testing.B) {
	for _, enc := range []struct {
		name   string
		encode func(*profile.Profile) ([]byte, error)
	}{{"gzip", record.EncodeProfile}, {"stored", record.EncodeProfileStored}} {
		b.Run(enc.name, func(b *testing.B) { benchDecodeAndAggregate(b, enc.encode) })
	}
}

func benchDecodeAndAggregate(b *testing.B, encode func(*profile.Profile) ([]byte, error)) {
	profs := benchProfiles(60)
	values := make([][]byte, len(profs))
	for i, pr := range profs {
		v, err := encode(pr)
		if err != nil {
			b.Fatal(err)
		}
		values[i] = v
	}
	cfg := Config{AllowedLateness: 2 * time.Minute, Retention: 10 * time.Minute, Names: indices.Default, Now: time.Now}
	p := NewPartition(cfg, Checkpoint{})
	b.SetBytes(int64(len(values[0])))
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuTime()
	for i := 0; b.Loop(); i++ {
		prof, err := record.DecodeProfile(values[i%len(values)])
		if err != nil {
			b.Fatal(err)
		}
		prof.TimeNanos += int64(i/len(values)) * int64(10*time.Minute)
		if _, err := p.Add(Input{Profile: prof, Type: record.ProfileCPU, Host: "web-1", Offset: int64(i)}); err != nil {
			b.Fatal(err)
		}
		if i%10 == 9 {
			pending := p.Pending(false)
			MarkStored(pending)
			p.Evict()
			if off, cp, ok := p.Commit(); ok {
				p.Committed(off, cp)
			}
		}
	}
	reportCPU(b, start)
}

// cpuTime is this process's user+system CPU time: the machine is shared, so
// wall time per op overstates the cost; CPU time per op does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports CPU time per profile and the profiles/s one core
// sustains at that cost.
func reportCPU(b *testing.B, start time.Duration) {
	per := float64(cpuTime()-start) / float64(b.N)
	b.ReportMetric(per, "cpu-ns/profile")
	b.ReportMetric(1e9/per, "profiles/cpu-s")
}

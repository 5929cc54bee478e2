package aggregate

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// fleetProfiles are CPU profiles shaped like stackctl loadgen's fleet
// (docs/STACKCTL.md, services/ctl/internal/loadgen, whose package is
// internal to services/ctl and cannot be imported here): hosts 8 cores at
// 19 Hz for 10 s, fully busy (1,520 ticks a profile), 5 services a host
// (one process each, the 7 labels loadgen sets), stacks 10 to 40 frames
// deep drawn from a pool of 60 per service (300 functions), 5% of samples varied per host
// (a host-specific leaf), ticks spread unevenly over the stacks. Profiles
// are interleaved host by host as a partition receives them.
func fleetProfiles(hosts, intervals int) ([]*profile.Profile, []string) {
	next := fleetGenerator(hosts)
	var out []*profile.Profile
	var hostOf []string
	for range intervals {
		profs, hs := next()
		out = append(out, profs...)
		hostOf = append(hostOf, hs...)
	}
	return out, hostOf
}

// fleetGenerator returns the fleetProfiles of one 10-second interval after
// another (every host's profile of it), so an hour of a fleet need not be
// held at once.
func fleetGenerator(hosts int) func() ([]*profile.Profile, []string) {
	rng := rand.New(rand.NewPCG(3, 4))
	const services, pool = 5, 60
	stacks := make([][][]string, services)
	for s := range stacks {
		stacks[s] = make([][]string, pool)
		for i := range stacks[s] {
			depth := 10 + rng.IntN(31)
			for range depth {
				stacks[s][i] = append(stacks[s][i], fmt.Sprintf("github.com/acme/svc%d/pkg%d.(*Server).handle%d", s, rng.IntN(20), rng.IntN(300)))
			}
		}
	}
	iv := 0
	return func() ([]*profile.Profile, []string) {
		var out []*profile.Profile
		var hostOf []string
		for h := range hosts {
			host := fmt.Sprintf("loadgen-%d", h)
			b := pproftest.NewCPU(t0.Add(time.Duration(iv)*10*time.Second), 10*time.Second)
			for s := range services {
				svc := fmt.Sprintf("svc-%d", (h+s)%50)
				labels := map[string]string{
					record.LabelService: svc, record.LabelPID: fmt.Sprint(1000 + s + iv/6),
					record.LabelComm: svc, record.LabelExecutable: "/opt/" + svc + "/bin/" + svc,
					record.LabelK8sNamespace: "loadgen", record.LabelK8sPod: fmt.Sprintf("%s-%d", svc, h%10),
					record.LabelK8sContainer: svc,
				}
				counts := map[int]int64{}
				for range 1520 / services {
					// Skewed: a few stacks take most ticks.
					i := int(float64(pool) * rng.Float64() * rng.Float64())
					counts[i]++
				}
				// In stack order: the same profiles every run.
				for _, i := range slices.Sorted(maps.Keys(counts)) {
					n := counts[i]
					st := stacks[s][i]
					if rng.Float64() < 0.05 {
						st = append([]string{fmt.Sprintf("%s.hostonly%d", host, rng.IntN(20))}, st...)
					}
					b.Sample(labels, []int64{n, n * 52631578}, st...)
				}
			}
			out = append(out, b.Profile())
			hostOf = append(hostOf, host)
		}
		iv++
		return out, hostOf
	}
}

// BenchmarkFleet folds loadgen-shaped profiles of 20 hosts in one partition
// and writes their windows as the consumer does (pending documents every
// 50 profiles, marked stored, eviction, commit), reporting CPU time per
// profile and the 8-core hosts one core sustains at one profile per 10 s;
// with minute partition trees off and on (STACKSTREAM_ROLLUP_MINUTE_TREES).
func BenchmarkFleet(b *testing.B) {
	const hosts = 20
	profs, hostOf := fleetProfiles(hosts, 12) // 2 minutes of 20 hosts
	for _, minuteTrees := range []bool{false, true} {
		b.Run(fmt.Sprintf("minute-trees=%v", minuteTrees), func(b *testing.B) {
			benchFleet(b, hosts, profs, hostOf, minuteTrees)
		})
	}
}

func benchFleet(b *testing.B, hosts int, profs []*profile.Profile, hostOf []string, minuteTrees bool) {
	// The service's defaults, the state budget included (its check runs
	// for every profile); no window heads.
	cfg := Config{AllowedLateness: 2 * time.Minute, Retention: 10 * time.Minute, Names: indices.Default, Now: time.Now,
		Budget: &Budget{MaxBytes: DefaultMaxStateBytes}, NoMinuteTrees: !minuteTrees, HeadMinNodes: math.MaxInt}
	p := NewPartition(cfg, Checkpoint{})
	docs, rows := 0, 0
	for _, pr := range profs {
		rows += len(pr.Sample)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuTime()
	for i := 0; b.Loop(); i++ {
		prof := profs[i%len(profs)]
		if i%len(profs) == 0 && i > 0 {
			for _, pr := range profs {
				pr.TimeNanos += int64(2 * time.Minute)
			}
		}
		if _, err := p.Add(Input{Profile: prof, Type: record.ProfileCPU, Host: hostOf[i%len(profs)], Offset: int64(i)}); err != nil {
			b.Fatal(err)
		}
		if i%hosts == hosts-1 {
			docs += benchFlush(b, p)
		}
	}
	per := float64(cpuTime()-start) / float64(b.N)
	b.ReportMetric(per, "cpu-ns/profile")
	b.ReportMetric(10e9/per, "hosts/core")
	b.ReportMetric(10e9/per/5000, "ratio-to-5000")
	b.ReportMetric(float64(docs)/float64(b.N), "docs/profile")
	b.ReportMetric(float64(encodedBytes)/float64(max(docs, 1)), "bytes/doc")
	b.ReportMetric(float64(rows)/float64(len(profs)), "rows/profile")
	encodedBytes = 0
}

var encodedBytes int

// benchFlush writes p's pending documents as the consumer's flush does
// (encoded, stored, evicted, committed) and returns how many there were.
func benchFlush(b *testing.B, p *Partition) int {
	pending := p.Pending(false)
	benchEncode(b, pending)
	MarkStored(pending)
	p.Evict()
	if off, cp, ok := p.Commit(); ok {
		p.Committed(off, cp)
	}
	return len(pending)
}

// benchEncode encodes the documents as the consumer does before its bulk
// write.
func benchEncode(b *testing.B, pending []Pending) {
	var buf []byte
	for i := range pending {
		doc, err := pending[i].AppendJSON(buf[:0])
		if err != nil {
			b.Fatal(err)
		}
		buf = doc
		encodedBytes += len(doc)
	}
}

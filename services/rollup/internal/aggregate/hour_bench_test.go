package aggregate

import (
	"math"
	"testing"

	"github.com/stackstream/stackstream/schemas/record"
)

// BenchmarkHourWrite builds the documents of an hour window of 20
// fleetProfiles hosts (5 minutes of them) as the write of an ended hour or
// an idle flush does: stacks documents, function documents, each host's
// tree, the service and partition trees; nothing is marked stored, so
// every iteration builds them all again.
func BenchmarkHourWrite(b *testing.B) {
	const hosts = 20
	profs, hostOf := fleetProfiles(hosts, 30)
	cfg := testConfig()
	cfg.Budget = &Budget{MaxBytes: math.MaxInt64}
	p := NewPartition(cfg, Checkpoint{})
	for i, pr := range profs {
		if _, err := p.Add(Input{Profile: pr, Type: record.ProfileCPU, Host: hostOf[i], Offset: int64(i)}); err != nil {
			b.Fatal(err)
		}
	}
	hour := p.windows[windowKey{res: "1h", start: t0.UnixNano()}]
	if hour == nil {
		b.Fatal("no hour window")
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuTime()
	docs := 0
	for b.Loop() {
		docs = len((&Flush{p: p, windows: []*window{hour}}).Next(math.MaxInt))
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e6, "cpu-ms/write")
	b.ReportMetric(float64(docs), "docs/write")
}

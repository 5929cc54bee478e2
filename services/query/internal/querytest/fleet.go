package querytest

import (
	"fmt"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
)

// FleetFixture is n hosts of one service ("fleet") with per-minute CPU
// rollups over the hour before now: host-<i> uses (i+1)/100 cores, so the
// heaviest host is host-<n-1> and every host differs. Each host also has
// one CPU sample document (no stack) 5 minutes before now, so label values
// (read from the samples) list every host; the charts read the rollups.
func FleetFixture(names indices.Names, now time.Time, n int) []Doc {
	t0 := now.UTC().Truncate(time.Minute)
	var docs []Doc
	var samples []indices.SampleDoc
	for i := 0; i < n; i++ {
		samples = append(samples, indices.SampleDoc{Timestamp: t0.Add(-5 * time.Minute), Type: "cpu", Host: fmt.Sprintf("host-%03d", i), Service: "fleet", Value: 1})
		cores := float64(i+1) / 100
		for m := 1; m <= 60; m++ {
			docs = append(docs, Rollup(names, indices.RollupDoc{Timestamp: t0.Add(-time.Duration(m) * time.Minute), Resolution: "1m",
				Kind: "service", Type: "cpu", Service: "fleet", Host: fmt.Sprintf("host-%03d", i),
				Value: int64(cores * float64(time.Minute)), Cores: cores}))
		}
	}
	return append(docs, Samples(names, samples...)...)
}

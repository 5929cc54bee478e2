package aggregate

import (
	"math"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// BenchmarkSnapshot folds 55 minutes of 20 loadgen-shaped hosts into one
// partition as the consumer does (written, evicted and committed after
// every interval), near the end of the hour where the state peaks, then
// times Snapshot and Restore of it, reporting the snapshot's bytes, per
// host and per byte of the Budget's charge.
func BenchmarkSnapshot(b *testing.B) {
	const hosts, intervals = 20, 330
	cfg := Config{AllowedLateness: 2 * time.Minute, Retention: 10 * time.Minute, Names: indices.Default, Now: func() time.Time { return t0.Add(24 * time.Hour) },
		Budget: &Budget{MaxBytes: math.MaxInt64}, HeadMinNodes: math.MaxInt}
	p := NewPartition(cfg, Checkpoint{})
	next := fleetGenerator(hosts)
	off := int64(0)
	for range intervals {
		profs, hostOf := next()
		for i, prof := range profs {
			if _, err := p.Add(Input{Profile: prof, Type: record.ProfileCPU, Host: hostOf[i], Offset: off}); err != nil {
				b.Fatal(err)
			}
			off++
		}
		MarkStored(p.Pending(false))
		p.Evict()
		if o, cp, ok := p.Commit(); ok {
			p.Committed(o, cp)
		}
	}
	charged := cfg.Budget.Used() - cfg.Budget.CacheBytes()
	snap := p.Snapshot(nil)
	report := func(b *testing.B) {
		b.ReportMetric(float64(len(snap)), "snapshot-B")
		b.ReportMetric(float64(len(snap))/hosts, "snapshot-B/host")
		b.ReportMetric(float64(len(snap))/float64(charged), "snapshot-B/charged-B")
		b.ReportMetric(float64(len(snap))/1e6/(b.Elapsed().Seconds()/float64(b.N)), "MB/s")
	}
	b.Run("snapshot", func(b *testing.B) {
		buf := make([]byte, 0, len(snap))
		for b.Loop() {
			buf = p.Snapshot(buf[:0])
		}
		report(b)
	})
	b.Run("restore", func(b *testing.B) {
		c := cfg
		for b.Loop() {
			c.Budget = &Budget{MaxBytes: math.MaxInt64}
			if _, err := Restore(c, snap); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
}

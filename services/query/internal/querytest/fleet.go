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

// WindowRollups builds what the rollup writes beside its minute stack
// documents: per (service, host) a `service` document of each minute and
// of each 10-minute window (value and stack_value), and per Kafka
// partition a `partition_tree` of each minute and of each 10-minute window
// (resolutions "1m" and "10m") with its head (indices.KindPartitionHead,
// HeadNodes nodes, indices.WindowHeadNodes when 0). Add every stack of
// every minute, then take Docs (tests may drop or alter some before
// indexing them).
type WindowRollups struct {
	HeadNodes int
	typ       string
	trees     map[windowKey]*indices.TreeBuilder
	services  map[windowKey]*int64
}

type windowKey struct {
	resolution    string
	start         int64
	partition     int32
	service, host string
}

// NewWindowRollups builds windows of one profile type.
func NewWindowRollups(typ string) *WindowRollups {
	return &WindowRollups{typ: typ, trees: map[windowKey]*indices.TreeBuilder{}, services: map[windowKey]*int64{}}
}

// Add counts a stack of value v (frames root first) in the minute at of
// service and host, whose records are in partition.
func (w *WindowRollups) Add(at time.Time, partition int32, service, host string, path []indices.TreeFrame, v int64) {
	minute := at.UTC().Truncate(time.Minute)
	for _, win := range []struct {
		res   string
		start time.Time
	}{{"1m", minute}, {"10m", minute.Truncate(10 * time.Minute)}} {
		tk := windowKey{resolution: win.res, start: win.start.UnixMilli(), partition: partition}
		if w.trees[tk] == nil {
			w.trees[tk] = &indices.TreeBuilder{}
		}
		w.trees[tk].Add(path, v)
		sk := windowKey{resolution: win.res, start: win.start.UnixMilli(), service: service, host: host}
		if w.services[sk] == nil {
			w.services[sk] = new(int64)
		}
		*w.services[sk] += v
	}
}

// Docs are the windows' documents as the rollup writes them.
func (w *WindowRollups) Docs() []indices.RollupDoc {
	var out []indices.RollupDoc
	heads := w.HeadNodes
	if heads == 0 {
		heads = indices.WindowHeadNodes
	}
	for k, tb := range w.trees {
		out = append(out, indices.RollupDoc{Timestamp: time.UnixMilli(k.start).UTC(), Resolution: k.resolution, Kind: indices.KindPartitionTree,
			Type: w.typ, Partition: k.partition, Value: tb.Total(), Tree: tb.Encode()},
			indices.RollupDoc{Timestamp: time.UnixMilli(k.start).UTC(), Resolution: k.resolution, Kind: indices.KindPartitionHead,
				Type: w.typ, Partition: k.partition, Value: tb.Total(), Tree: tb.EncodeHead(heads)})
	}
	for k, v := range w.services {
		span := time.Minute
		if k.resolution == "10m" {
			span = 10 * time.Minute
		}
		out = append(out, indices.RollupDoc{Timestamp: time.UnixMilli(k.start).UTC(), Resolution: k.resolution, Kind: indices.KindService,
			Type: w.typ, Service: k.service, Host: k.host, Value: *v, StackValue: *v, Cores: float64(*v) / float64(span)})
	}
	return out
}

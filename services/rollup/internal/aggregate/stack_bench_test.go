package aggregate

import (
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/record"
)

// BenchmarkNewStack builds stacks new to the stack cache from a Wire
// (wireStack's miss: naming the stack's frames, numbering them in the
// frame table, hashing its ID), as the pipeline bench's part A does for
// each of its 68,536 stacks: the stacks of one fleet host's profile,
// built again after the cache's stacks are dropped, from the profile
// decoded again (the frame table, and the locations the cache keeps,
// stay, as they do for a new stack whose callers were seen before).
// BenchmarkFleet does not reach this path: its stacks are in the cache
// after the first minute.
func BenchmarkNewStack(b *testing.B) {
	profs, _ := fleetProfiles(1, 1)
	value, dec := stored(b, profs[0]), NewDecoder(record.Limits{})
	decode := func() *Wire {
		in, err := dec.Decode(value)
		if err != nil || in.Wire == nil {
			b.Fatalf("decoded %v, %v", in.Wire != nil, err)
		}
		return in.Wire
	}
	w := decode()
	p := NewPartition(testConfig(), Checkpoint{})
	c := p.stacks
	// The rows of distinct stacks.
	var rows [][]int32
	for _, row := range w.sampleRows {
		locs := w.locs[row.locs[0]:row.locs[1]]
		if n := c.n; len(locs) > 0 && p.wireStack(w, locs) != nil && c.n > n {
			rows = append(rows, locs)
		}
	}
	// The profile decoded again: its locations are hashed and looked up
	// in the cache again, as in a profile of another host.
	drop := func() {
		c.charge(-(c.bytes - c.tableBytes))
		c.m, c.n = map[[2]uint64]*stackInfo{}, 0
		w = decode()
	}
	drop()
	b.ReportAllocs()
	var cpu time.Duration
	start := cpuTime()
	for i := 0; b.Loop(); i++ {
		if i%len(rows) == 0 && i > 0 {
			b.StopTimer()
			cpu += cpuTime() - start
			drop()
			start = cpuTime()
			b.StartTimer()
		}
		p.wireStack(w, rows[i%len(rows)])
	}
	cpu += cpuTime() - start
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/stack")
	b.ReportMetric(float64(len(rows)), "stacks")
}

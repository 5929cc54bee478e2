package pipeline

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// TestPartHourDocuments, through Kafka and OpenSearch: the minute and
// 10-minute partition trees of two partitions merge to every stack of
// their window (compare), each window's trees add up to its service
// documents' stack_value, a late profile rewrites its minute's and its
// 10 minutes' trees, and a replay writes the same documents (trees byte
// for byte) under the same _ids.
func TestPartHourDocuments(t *testing.T) {
	e := newEnv(t, 2)
	e.window.Retention = 10 * time.Minute
	x := expected{}
	hosts := []string{"web-1", "web-2", "web-3", "web-4"}
	n := 0
	// 10:00 to 10:22:40, every 20 s per host: the watermark closes the
	// 10-minute window 10:10 (at 10:21) while the consumer runs.
	for k := range 69 {
		for h, host := range hosts {
			at := t0.Add(time.Duration(k)*20*time.Second + time.Duration(h)*time.Second)
			e.produce(record.ProfileCPU, host, x.cpuProfile(host, at, int64(100*(h+1)+k), int64(3+k%5)))
			n++
		}
	}
	tenTen := t0.Add(10 * time.Minute)
	minute := t0.Add(15 * time.Minute)
	// What the two windows' trees hold once every partition wrote them
	// (a partition that wrote first must not pass for the whole).
	before, beforeMinute := x.stackValue(indices.ResolutionTenMinutes, tenTen), x.stackValue(indices.ResolutionMinute, minute)
	in := e.start(e.osURL)
	waitFor(t, "10:10's 10-minute and 10:15's minute partition trees written", 90*time.Second, func() bool {
		return e.sumValue(indices.KindPartitionTree, indices.ResolutionTenMinutes, tenTen) == before &&
			e.sumStackValue(indices.ResolutionTenMinutes, tenTen) == before &&
			e.sumValue(indices.KindPartitionTree, indices.ResolutionMinute, minute) == beforeMinute
	})

	// Late (10:15:30, within lateness and retention): both windows'
	// trees are rewritten whole.
	e.produce(record.ProfileCPU, "web-2", x.cpuProfile("web-2", minute.Add(30*time.Second), 5000, 11))
	// Written again once its partition's watermark moves a minute
	// (aggregate.RewriteDelay): from 10:22:43 to 10:23:50.
	e.produce(record.ProfileCPU, "web-2", x.cpuProfile("web-2", t0.Add(23*time.Minute+50*time.Second), 7, 1))
	n += 2
	waitFor(t, "the late profile's windows rewritten", 90*time.Second, func() bool {
		return e.sumValue(indices.KindPartitionTree, indices.ResolutionTenMinutes, tenTen) == before+5011 &&
			e.sumValue(indices.KindPartitionTree, indices.ResolutionMinute, minute) == beforeMinute+5011
	})
	waitFor(t, "every record folded in", 60*time.Second, func() bool { return in.count("added") == n })
	in.close(t)
	first := e.docs()
	compare(t, byKey(first), x.finish())
	checkPartHourTotals(t, first)
	if t.Failed() {
		t.FailNow()
	}

	// Replay from the start: the same documents, the same bytes.
	e.replaySame(t, 2, n, first)
}

// checkPartHourTotals: every part-hour window's partition trees (one per
// partition) add up to its service documents' stack_value, which is what
// the query checks before it reads them.
func checkPartHourTotals(t *testing.T, docs map[string]indices.RollupDoc) {
	t.Helper()
	type window struct {
		res string
		at  int64
	}
	trees, services := map[window]int64{}, map[window]int64{}
	for _, d := range docs {
		w := window{d.Resolution, d.Timestamp.Unix()}
		switch {
		case d.Resolution == indices.ResolutionHour || d.Type != "cpu":
		case d.Kind == indices.KindPartitionTree:
			trees[w] += d.Value
		case d.Kind == indices.KindService:
			services[w] += d.StackValue
		}
	}
	if len(trees) != 24+3 {
		t.Errorf("part-hour partition trees in %d windows, want 24 minutes (10:00 to 10:23) and 3 10-minute windows", len(trees))
	}
	for w, v := range services {
		if trees[w] != v || v == 0 {
			t.Errorf("%s at %s: partition trees %d, service documents' stack_value %d", w.res, time.Unix(w.at, 0).UTC().Format("15:04"), trees[w], v)
		}
	}
}

// stackValue sums the expected stack_value of the CPU service documents
// of a resolution at t.
func (x expected) stackValue(res string, t time.Time) int64 {
	var sum int64
	for _, d := range x {
		if d.Kind == indices.KindService && d.Type == "cpu" && d.Resolution == res && d.Timestamp.Equal(t) {
			sum += d.StackValue
		}
	}
	return sum
}

// sumStackValue sums the stack_value of the CPU service documents of a
// resolution at t.
func (e *env) sumStackValue(res string, t time.Time) int64 {
	e.t.Helper()
	var sum int64
	for _, d := range e.docs() {
		if d.Kind == indices.KindService && d.Type == "cpu" && d.Resolution == res && d.Timestamp.Equal(t) {
			sum += d.StackValue
		}
	}
	return sum
}

// checkPartitionHeads: every partition head (indices.KindPartitionHead) is
// the head of its window's partition tree, its indices.WindowHeadNodes
// heaviest nodes, byte for byte, with the tree's total as its value; the
// heads are then removed from docs (compare checks the rest).
func checkPartitionHeads(t *testing.T, docs map[string]indices.RollupDoc) {
	t.Helper()
	key := func(d indices.RollupDoc) string {
		return fmt.Sprintf("%s %s %s partition %d", d.Resolution, d.Timestamp.UTC().Format("15:04"), d.Type, d.Partition)
	}
	trees := map[string]indices.RollupDoc{}
	for _, d := range docs {
		if d.Kind == indices.KindPartitionTree {
			trees[key(d)] = d
		}
	}
	for k, d := range docs {
		if d.Kind != indices.KindPartitionHead {
			continue
		}
		delete(docs, k)
		tree, ok := trees[key(d)]
		if !ok {
			t.Errorf("partition head %s without its tree", key(d))
			continue
		}
		var b indices.TreeBuilder
		if err := b.AddTree(tree.Tree, indices.TreeLimits{}); err != nil {
			t.Errorf("partition tree %s: %v", key(d), err)
			continue
		}
		if d.Value != tree.Value || !bytes.Equal(d.Tree, b.EncodeHead(indices.WindowHeadNodes)) {
			t.Errorf("partition head %s: value %d (tree %d), or not the tree's head", key(d), d.Value, tree.Value)
		}
	}
}

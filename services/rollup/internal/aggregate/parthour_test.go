package aggregate

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/pprofx"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// partHourInputs are 2 fleetGenerator hosts' profiles from 10:00 to
// 11:15, with late profiles of 10:53-10:59 arriving after the hour 10:00
// was written and frozen (their stacks go to its late trie) and one
// profile of 10:58 read again at 11:06.
func partHourInputs() []Input {
	const hosts = 2
	next := fleetGenerator(hosts)
	var out []Input
	var again Input
	for iv := range 6 * 75 {
		profs, hostOf := next()
		for i, prof := range profs {
			out = append(out, Input{Profile: prof, Type: record.ProfileCPU, Host: hostOf[i]})
		}
		switch iv {
		case 6 * 58:
			again = out[len(out)-len(profs)]
		case 6 * 66:
			out = append(out, again)
		}
		if at := t0.Add(time.Duration(iv) * 10 * time.Second); at.After(t0.Add(65*time.Minute)) && at.Before(t0.Add(71*time.Minute)) {
			late := pproftest.NewCPU(at.Add(-12*time.Minute+30*time.Second), 10*time.Second).
				Sample(svc("late"), []int64{1, 1000 + int64(iv)}, "lateleaf", "latemain").
				Sample(svc("late"), []int64{1, 7}, fmt.Sprintf("late%d", iv%3), "latemain").Profile()
			out = append(out, Input{Profile: late, Type: record.ProfileCPU, Host: fmt.Sprintf("loadgen-%d", iv%hosts)})
		}
	}
	return out
}

// partHourRun folds ins, flushing every flushEvery profiles (and when an
// hour ends, as the consumer does). It returns every document as last
// written (by _id) and how many times each was written.
func partHourRun(t *testing.T, ins []Input, flushEvery int, opts ...func(*Config)) (store map[string]indices.RollupDoc, writes map[string]int) {
	t.Helper()
	cfg := testConfig()
	for _, o := range opts {
		o(&cfg)
	}
	cfg.Retention = 10 * time.Minute
	cfg.Partition = 2
	cfg.Budget = &Budget{MaxBytes: math.MaxInt64}
	p := NewPartition(cfg, Checkpoint{})
	store, writes = map[string]indices.RollupDoc{}, map[string]int{}
	flush := func(all bool) {
		docs := p.Pending(all)
		for _, d := range docs {
			store[d.ID] = d.Doc
			writes[d.ID]++
		}
		MarkStored(docs)
		p.Evict()
		if o, cp, ok := p.Commit(); ok {
			p.Committed(o, cp)
		}
	}
	for i, in := range ins {
		in.Offset = int64(i)
		if out, err := p.Add(in); err != nil || out != Added {
			t.Fatalf("offset %d: %v, outcome %d", i, err, out)
		}
		if p.HoldsEndedHour() || (i+1)%flushEvery == 0 {
			flush(false)
		}
	}
	flush(true)
	return store, writes
}

// partHourWant is the brute force: per part-hour window (resolution and
// start), every sample's stack of ins merged into a tree.
func partHourWant(ins []Input) map[windowKey]*indices.TreeBuilder {
	want := map[windowKey]*indices.TreeBuilder{}
	for _, in := range ins {
		for _, res := range []string{indices.ResolutionMinute, indices.ResolutionTenMinutes} {
			k := windowKey{res, truncate(in.Profile.TimeNanos, indices.WindowSize(res))}
			if want[k] == nil {
				want[k] = &indices.TreeBuilder{}
			}
			for _, s := range in.Profile.Sample {
				want[k].AddStack(pprofx.StackFrames(s), s.Value[1])
			}
		}
	}
	return want
}

// TestPartHourTrees: every minute and 10-minute partition tree is the
// merge of every stack of its window (a brute force from the profiles
// folded), its total is the sum of the stack_value of its window's
// service documents, a 10-minute window's service documents sum its
// minutes', a late profile rewrites its windows' trees, and another flush
// cadence (so the hour frozen at other times, its late stacks numbered
// otherwise) writes the same bytes under the same _ids.
func TestPartHourTrees(t *testing.T) {
	if testing.Short() {
		t.Skip("folds 900 fleet-shaped profiles twice")
	}
	ins := partHourInputs()
	store, writes := partHourRun(t, ins, 1)
	want := partHourWant(ins)
	type sums struct{ value, stackValue, samples int64 }
	service := map[windowKey]sums{}
	trees := map[windowKey]indices.RollupDoc{}
	treeIDs := map[windowKey]string{}
	for id, d := range store {
		k := windowKey{d.Resolution, d.Timestamp.UnixNano()}
		switch d.Kind {
		case indices.KindService:
			s := service[k]
			service[k] = sums{s.value + d.Value, s.stackValue + d.StackValue, s.samples + d.Samples}
		case indices.KindPartitionTree:
			if d.Resolution == indices.ResolutionHour {
				continue
			}
			if _, dup := trees[k]; dup || d.Partition != 2 || d.Type != "cpu" || d.Service != "" || d.Host != "" {
				t.Fatalf("partition tree %s %v: %+v", id, k, d)
			}
			if d.Resolution == indices.ResolutionTenMinutes && d.Timestamp.Minute()%10 != 0 {
				t.Fatalf("10-minute window at %s", d.Timestamp)
			}
			trees[k], treeIDs[k] = d, id
		}
	}
	if len(trees) != len(want) || len(want) != 75+8 {
		t.Fatalf("%d partition trees, %d windows with profiles, want 75 minutes and 8 10-minute windows", len(trees), len(want))
	}
	for k, b := range want {
		d, ok := trees[k]
		if !ok {
			t.Fatalf("no partition tree of %s %s", k.res, time.Unix(0, k.start).UTC())
		}
		got, exp := decodeTree(t, d.Tree), decodeTree(t, b.Encode())
		if len(got) != len(exp) || d.Value != b.Total() {
			t.Fatalf("%s %s: %d paths worth %d, want %d worth %d", k.res, time.Unix(0, k.start).UTC(), len(got), d.Value, len(exp), b.Total())
		}
		for path, v := range exp {
			if got[path] != v {
				t.Fatalf("%s %s: %s is %v, want %v", k.res, time.Unix(0, k.start).UTC(), path, got[path], v)
			}
		}
		if s := service[k]; s.stackValue != d.Value {
			t.Fatalf("%s %s: tree worth %d, the service documents' stack_value %d", k.res, time.Unix(0, k.start).UTC(), d.Value, s.stackValue)
		}
	}
	for k, s := range service {
		if k.res != indices.ResolutionTenMinutes {
			continue
		}
		var minutes sums
		for m := range 10 {
			ms := service[windowKey{indices.ResolutionMinute, k.start + int64(m)*int64(time.Minute)}]
			minutes = sums{minutes.value + ms.value, minutes.stackValue + ms.stackValue, minutes.samples + ms.samples}
		}
		if s != minutes || s.value == 0 {
			t.Fatalf("10-minute window %s: service documents %+v, its minutes %+v", time.Unix(0, k.start).UTC(), s, minutes)
		}
	}

	// The late profiles of 10:53-10:59 rewrote those windows' trees.
	late := t0.Add(50 * time.Minute).UnixNano()
	if k := (windowKey{indices.ResolutionTenMinutes, late}); writes[treeIDs[k]] < 2 || !strings.Contains(fmt.Sprint(decodeTree(t, trees[k].Tree)), "latemain;lateleaf") {
		t.Fatalf("10:50's tree written %d times, paths %v", writes[treeIDs[k]], decodeTree(t, trees[k].Tree))
	}
	if k := (windowKey{indices.ResolutionMinute, t0.Add(56 * time.Minute).UnixNano()}); writes[treeIDs[k]] < 2 {
		t.Fatalf("10:56's tree written %d times", writes[treeIDs[k]])
	}

	// Another cadence: the same bytes.
	again, _ := partHourRun(t, ins, 7)
	for k, id := range treeIDs {
		a, b := store[id], again[id]
		ja, err := (&Pending{Doc: a}).AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		jb, err := (&Pending{Doc: b}).AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(ja) != string(jb) {
			t.Fatalf("%s %s: another flush cadence wrote other bytes", k.res, time.Unix(0, k.start).UTC())
		}
	}
	for id, d := range store {
		if d.Resolution == indices.ResolutionTenMinutes && d.Kind == indices.KindService && again[id].Value != d.Value {
			t.Fatalf("10-minute service document %s: %d, then %d", id, d.Value, again[id].Value)
		}
	}
}

// TestTenMinuteMemory: a 10-minute service document of memory profiles
// averages the service's RSS over the window's profiles, as minutes and
// hours do.
func TestTenMinuteMemory(t *testing.T) {
	p := NewPartition(testConfig(), Checkpoint{})
	for i, rss := range []int64{100, 300, 200} {
		b := pproftest.NewMemory(t0.Add(time.Duration(i)*3*time.Minute), 10*time.Second)
		b.Sample(svc("db"), []int64{rss})
		add(t, p, b.Profile(), record.ProfileMemory, int64(i))
	}
	for _, d := range p.Pending(true) {
		if d.Doc.Resolution == indices.ResolutionTenMinutes {
			if d.Doc.Kind != indices.KindService || d.Doc.MemAvg != 200 || d.Doc.MemMax != 300 || d.ID != indices.RollupID(&d.Doc) {
				t.Fatalf("10-minute document %+v", d.Doc)
			}
			return
		}
	}
	t.Fatal("no 10-minute document")
}

// TestNoMinuteTrees: with NoMinuteTrees the minutes have no partition tree
// and everything else is written as with them, byte for byte.
func TestNoMinuteTrees(t *testing.T) {
	if testing.Short() {
		t.Skip("folds 900 fleet-shaped profiles twice")
	}
	ins := partHourInputs()
	with, _ := partHourRun(t, ins, 1)
	without, _ := partHourRun(t, ins, 1, func(c *Config) { c.NoMinuteTrees = true })
	minuteTrees, tenMinuteTrees := 0, 0
	for id, d := range with {
		if d.Kind == indices.KindPartitionTree && d.Resolution == indices.ResolutionMinute {
			minuteTrees++
			if _, ok := without[id]; ok {
				t.Fatalf("minute partition tree %s written with NoMinuteTrees", id)
			}
			continue
		}
		if d.Kind == indices.KindPartitionTree && d.Resolution == indices.ResolutionTenMinutes {
			tenMinuteTrees++
		}
		got, ok := without[id]
		if !ok || !reflect.DeepEqual(got, d) {
			t.Fatalf("%s %s %s: with NoMinuteTrees %+v, without %+v", d.Kind, d.Resolution, d.Timestamp, got, d)
		}
	}
	if minuteTrees != 75 || tenMinuteTrees != 8 || len(without) != len(with)-minuteTrees {
		t.Fatalf("%d minute and %d 10-minute trees, %d documents with, %d without", minuteTrees, tenMinuteTrees, len(with), len(without))
	}
}

// TestHeadMinNodes: with Config.HeadMinNodes a window writes its partition
// head only when its partition tree has more nodes than that; every other
// document is the same bytes as with every head written.
func TestHeadMinNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("folds 900 fleet-shaped profiles twice")
	}
	ins := partHourInputs()
	all, _ := partHourRun(t, ins, 1)
	nodes := map[string]int{} // tree nodes by window and partition
	key := func(d indices.RollupDoc) string {
		return fmt.Sprintf("%s %d %s %d", d.Resolution, d.Timestamp.Unix(), d.Type, d.Partition)
	}
	var sizes []int
	for _, d := range all {
		if d.Kind == indices.KindPartitionTree && d.Resolution != indices.ResolutionHour {
			var b indices.TreeBuilder
			if err := b.AddTree(d.Tree, indices.TreeLimits{}); err != nil {
				t.Fatal(err)
			}
			nodes[key(d)] = b.Nodes()
			sizes = append(sizes, b.Nodes())
		}
	}
	slices.Sort(sizes)
	limit := sizes[len(sizes)/2]
	some, _ := partHourRun(t, ins, 1, func(c *Config) { c.HeadMinNodes = limit })
	kept, left := 0, 0
	for id, d := range all {
		got, ok := some[id]
		if d.Kind != indices.KindPartitionHead {
			if !ok || !reflect.DeepEqual(got, d) {
				t.Fatalf("%s %s %s: with HeadMinNodes %d %+v, without %+v", d.Kind, d.Resolution, d.Timestamp, limit, got, d)
			}
			continue
		}
		n, hasTree := nodes[key(d)]
		switch {
		case !hasTree:
			t.Fatalf("head %s without its tree", key(d))
		case n > limit && (!ok || !reflect.DeepEqual(got, d)):
			t.Fatalf("head %s of a %d-node tree: written %v, or not the same, with HeadMinNodes %d", key(d), n, ok, limit)
		case n <= limit && ok:
			t.Fatalf("head %s of a %d-node tree written with HeadMinNodes %d", key(d), n, limit)
		case ok:
			kept++
		default:
			left++
		}
	}
	if len(some) != len(all)-left || kept == 0 || left == 0 {
		t.Fatalf("%d heads kept, %d left out, %d documents of %d", kept, left, len(some), len(all))
	}
}

package daytrees

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	osgo "github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/rollup/internal/rolluptest"
)

type paths struct {
	frames []indices.TreeFrame
	path   []string
	out    map[string][2]int64
}

func (p *paths) Frames(f []indices.TreeFrame) { p.frames = f }

func (p *paths) Node(depth int, frame int32, self, total int64) {
	p.path = append(p.path[:depth-1], p.frames[frame].Name)
	k := strings.Join(p.path, ";")
	v := p.out[k]
	p.out[k] = [2]int64{v[0] + self, v[1] + total}
}

func decode(t *testing.T, b []byte) map[string][2]int64 {
	t.Helper()
	p := &paths{out: map[string][2]int64{}}
	if _, _, err := indices.DecodeTree(b, indices.TreeLimits{}, p); err != nil {
		t.Fatal(err)
	}
	return p.out
}

// TestCompactor: a settled day's hour partition trees become one day tree
// per (type, partition) equal to their merge, and the fleet head of the
// day the head of all of them merged; a second pass writes nothing; an
// hour rewritten afterwards makes the next pass rewrite that partition's
// day tree and the head.
func TestCompactor(t *testing.T) {
	ctx := context.Background()
	cl, names := rolluptest.Rollups(t, "dt-")
	day := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	want := map[int32]*indices.TreeBuilder{0: {}, 1: {}}
	hourTree := func(p int32, h int, extra string) indices.RollupDoc {
		var b indices.TreeBuilder
		for i := 0; i < 5; i++ {
			path := []indices.TreeFrame{{Name: "main"}, {Name: fmt.Sprintf("f%d", (h+i)%7)}, {Name: fmt.Sprintf("p%d.h%d.%d%s", p, h, i, extra)}}
			b.Add(path, int64(i+1))
		}
		return indices.RollupDoc{Timestamp: day.Add(time.Duration(h) * time.Hour), Resolution: indices.ResolutionHour, Kind: indices.KindPartitionTree,
			Type: "cpu", Partition: p, Value: b.Total(), Tree: b.Encode()}
	}
	for _, p := range []int32{0, 1} {
		for h := 0; h < 24; h++ {
			d := hourTree(p, h, "")
			rolluptest.Put(t, cl, names, d)
			if err := want[p].AddTree(d.Tree, indices.TreeLimits{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := &Compactor{Client: cl, Names: names, Days: 3, Now: func() time.Time { return day.Add(50 * time.Hour) }}
	if n, err := c.Apply(ctx); err != nil || n != 5+24 {
		t.Fatalf("first pass wrote %d (%v), want 29 (2 day trees, their function tables, the day's head, 24 hour heads)", n, err)
	}
	readDoc := func(d indices.RollupDoc) indices.RollupDoc {
		t.Helper()
		status, resp, err := opensearch.Raw(ctx, cl, http.MethodGet, "/"+names.Rollups(day)+"/_doc/"+indices.RollupID(&d), nil)
		if err != nil || status != http.StatusOK {
			t.Fatalf("get day tree: %d %v %s", status, err, resp)
		}
		var out struct {
			Source indices.RollupDoc `json:"_source"`
		}
		if err := json.Unmarshal(resp, &out); err != nil {
			t.Fatal(err)
		}
		return out.Source
	}
	read := func(p int32) indices.RollupDoc {
		return readDoc(indices.RollupDoc{Timestamp: day, Resolution: indices.ResolutionDay, Kind: indices.KindPartitionTree, Type: "cpu", Partition: p})
	}
	// The head of 10 nodes of the fleet's day: the merge of both
	// partitions' hours.
	checkHead := func(parts ...*indices.TreeBuilder) {
		t.Helper()
		var all indices.TreeBuilder
		for _, p := range parts {
			if err := all.AddTree(p.Encode(), indices.TreeLimits{}); err != nil {
				t.Fatal(err)
			}
		}
		h := readDoc(indices.RollupDoc{Timestamp: day, Resolution: indices.ResolutionDay, Kind: indices.KindFleetHead, Type: "cpu"})
		if h.Value != all.Total() || string(h.Tree) != string(all.EncodeHead(indices.HeadNodes)) {
			t.Fatalf("fleet head value %d (%d bytes), want %d (%d bytes)", h.Value, len(h.Tree), all.Total(), len(all.EncodeHead(indices.HeadNodes)))
		}
	}
	checkHead(want[0], want[1])
	// The head of each hour: its two partition trees merged.
	checkHourHead := func(h int, trees ...indices.RollupDoc) {
		t.Helper()
		var all indices.TreeBuilder
		for _, d := range trees {
			if err := all.AddTree(d.Tree, indices.TreeLimits{}); err != nil {
				t.Fatal(err)
			}
		}
		at := day.Add(time.Duration(h) * time.Hour)
		got := readDoc(indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionHour, Kind: indices.KindFleetHead, Type: "cpu"})
		if got.Value != all.Total() || !got.Timestamp.Equal(at) || got.Sources == "" || string(got.Tree) != string(all.EncodeHead(indices.HeadNodes)) {
			t.Fatalf("hour %d head: value %d at %s (%d bytes), want %d (%d bytes)", h, got.Value, got.Timestamp, len(got.Tree), all.Total(), len(all.EncodeHead(indices.HeadNodes)))
		}
	}
	for h := 0; h < 24; h++ {
		checkHourHead(h, hourTree(0, h, ""), hourTree(1, h, ""))
	}
	for _, p := range []int32{0, 1} {
		d := read(p)
		if d.Value != want[p].Total() || d.Sources == "" {
			t.Fatalf("partition %d day tree value %d sources %q, want %d", p, d.Value, d.Sources, want[p].Total())
		}
		got, w := decode(t, d.Tree), decode(t, want[p].Encode())
		if len(got) != len(w) {
			t.Fatalf("partition %d: %d nodes, want %d", p, len(got), len(w))
		}
		for k, v := range w {
			if got[k] != v {
				t.Fatalf("partition %d %s: %v, want %v", p, k, got[k], v)
			}
		}
	}
	// Each day tree's function table: every function of the day's merge,
	// with the day tree's sources.
	checkTable := func(p int32, tree indices.RollupDoc) {
		t.Helper()
		d := readDoc(indices.RollupDoc{Timestamp: day, Resolution: indices.ResolutionDay, Kind: indices.KindFunctionTable, Type: "cpu", Partition: p})
		got, err := indices.DecodeFunctionTable(d.Tree, indices.TreeLimits{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := indices.TreeFunctions(tree.Tree, indices.TreeLimits{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Sources != tree.Sources || d.Value != tree.Value || got.Total != tree.Value || !got.Complete() || !slices.Equal(got.Kept, w.Kept) {
			t.Fatalf("partition %d function table: sources %q value %d, %d of %d functions; want the day tree's %q, %d, %d functions",
				p, d.Sources, d.Value, len(got.Kept), got.Functions, tree.Sources, tree.Value, len(w.Kept))
		}
	}
	checkTable(0, read(0))
	checkTable(1, read(1))
	refresh := func() {
		t.Helper()
		if _, _, err := opensearch.Raw(ctx, cl, http.MethodPost, "/"+names.Prefix+"*/_refresh", nil); err != nil {
			t.Fatal(err)
		}
	}
	refresh()
	if n, err := c.Apply(ctx); err != nil || n != 0 {
		t.Fatalf("second pass wrote %d (%v), want 0", n, err)
	}
	// A day tree without its table (written before tables) is written
	// again with it.
	table0 := indices.RollupDoc{Timestamp: day, Resolution: indices.ResolutionDay, Kind: indices.KindFunctionTable, Type: "cpu", Partition: 0}
	if status, resp, err := opensearch.Raw(ctx, cl, http.MethodDelete, "/"+names.Rollups(day)+"/_doc/"+indices.RollupID(&table0)+"?refresh=true", nil); err != nil || status != http.StatusOK {
		t.Fatalf("delete the function table: %d %v %s", status, err, resp)
	}
	if n, err := c.Apply(ctx); err != nil || n != 2 {
		t.Fatalf("pass without a table wrote %d (%v), want 2 (partition 0's day tree and table)", n, err)
	}
	checkTable(0, read(0))
	refresh()
	// A replay rewrites hour 5 of partition 1 with other frame names (same
	// values): only that partition's day tree is rewritten, with them.
	rolluptest.Put(t, cl, names, hourTree(1, 5, "-resymbolized"))
	before := read(1).Sources
	if n, err := c.Apply(ctx); err != nil || n != 4 {
		t.Fatalf("pass after a rewrite wrote %d (%v), want 4 (partition 1's day tree and table, the day's head, hour 5's head)", n, err)
	}
	checkHourHead(5, hourTree(0, 5, ""), hourTree(1, 5, "-resymbolized"))
	after := read(1)
	if after.Sources == before {
		t.Fatal("day tree sources did not change")
	}
	checkTable(1, after)
	if got := decode(t, after.Tree); got["main;f5;p1.h5.0-resymbolized"] != [2]int64{1, 1} || got["main;f5;p1.h5.0"] != [2]int64{} {
		t.Fatal("the rewritten hour's new frames are not in the day tree")
	}
	var rewritten indices.TreeBuilder
	if err := rewritten.AddTree(after.Tree, indices.TreeLimits{}); err != nil {
		t.Fatal(err)
	}
	checkHead(want[0], &rewritten)
}

// TestPartialAnswer: a search answer OpenSearch timed out on or with a
// failed shard is an error (ErrPartial), not a day with fewer hours.
func TestPartialAnswer(t *testing.T) {
	for _, answer := range []string{
		`{"timed_out":true,"_shards":{"failed":0},"hits":{"hits":[]}}`,
		`{"timed_out":false,"_shards":{"failed":1},"hits":{"hits":[]}}`,
	} {
		t.Run(answer, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, answer)
			}))
			defer srv.Close()
			cl, err := opensearchapi.NewClient(opensearchapi.Config{Client: osgo.Config{Addresses: []string{srv.URL}}})
			if err != nil {
				t.Fatal(err)
			}
			day := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
			c := &Compactor{Client: cl, Names: indices.Names{Prefix: "p-"}, Days: 1, Now: func() time.Time { return day.Add(25 * time.Hour) }}
			if n, err := c.Apply(context.Background()); !errors.Is(err, ErrPartial) || n != 0 {
				t.Fatalf("Apply = %d, %v; want ErrPartial", n, err)
			}
		})
	}
}

// TestWindowHeads: ApplyWindows writes, per settled 10-minute window of
// the last RecentWindows and per settled minute of the last
// RecentMinutes, the head of its partition trees merged (deflated trees,
// as the rollup writes them) with their total as value and their versions
// as sources; not the windows still within their settling time, nor
// older ones (Apply writes those); a second pass writes nothing; a
// rewritten partition tree gets its window's head rewritten.
func TestWindowHeads(t *testing.T) {
	ctx := context.Background()
	at := func(hm string) time.Time {
		d, err := time.Parse("2006-01-02 15:04", "2026-11-28 "+hm)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	now := at("12:41") // 12:30 ended a minute ago, 12:40 is filling; the minute 12:38 ended 2 minutes ago
	for _, tc := range []struct {
		h      fleetHeads
		first  time.Time // the first window with trees, older than the recent ones
		older  int       // windows from first before the recent ones (from now less recent, rounded down to a search span)
		every  int       // between its first 20 windows and its last 12, one window in every has trees
		recent int       // settled windows with trees from then on
	}{
		{h: windowHeads, first: at("09:00"), older: 6, every: 1, recent: 15}, // 10:00-12:20
		// 09:40-09:49, 09:50-12:20 every 10 minutes, 12:29-12:38.
		{h: minuteHeads, first: at("09:30"), older: 10, every: 10, recent: 10 + 16 + 10},
	} {
		t.Run(tc.h.res, func(t *testing.T) {
			cl, names := rolluptest.Rollups(t, "wh-")
			size := indices.WindowSize(tc.h.res)
			tree := func(p int32, w time.Time, extra string) indices.RollupDoc {
				var b indices.TreeBuilder
				for i := 0; i < 30; i++ {
					b.Add([]indices.TreeFrame{{Name: "main"}, {Name: fmt.Sprintf("f%d", i%4)}, {Name: fmt.Sprintf("p%d.%d.%d%s", p, w.Minute(), i, extra)}}, int64(i%5+1))
				}
				return indices.RollupDoc{Timestamp: w, Resolution: tc.h.res, Kind: indices.KindPartitionTree,
					Type: "cpu", Partition: p, Value: b.Total(), Tree: indices.Deflate(b.Encode())}
			}
			// The windows from first to now have trees, those not yet
			// settled too (to test the bound).
			var windows []time.Time
			var trees []indices.RollupDoc
			for i, w := 0, tc.first; !w.After(now); i, w = i+1, w.Add(size) {
				if i < 20 || !w.Before(now.Add(-12*size)) || i%tc.every == 0 {
					windows = append(windows, w)
					trees = append(trees, tree(0, w, ""), tree(1, w, ""))
				}
			}
			rolluptest.Put(t, cl, names, trees...)
			c := &Compactor{Client: cl, Names: names, Days: 1, Now: func() time.Time { return now }}
			settled := func(w time.Time) bool { return !w.Add(size + tc.h.settle).After(now) }
			recentFrom := tc.first.Add(time.Duration(tc.older) * size)
			var lastSettled time.Time
			recent := 0
			for _, w := range windows {
				if settled(w) {
					lastSettled = w
					if !w.Before(recentFrom) {
						recent++
					}
				}
			}
			if n, err := c.ApplyWindows(ctx); err != nil || n != recent || recent != tc.recent {
				t.Fatalf("first pass wrote %d (%v), want %d (the settled windows from %s)", n, err, recent, recentFrom.Format("15:04"))
			}
			head := func(w time.Time) (indices.RollupDoc, bool) {
				t.Helper()
				d := indices.RollupDoc{Timestamp: w, Resolution: tc.h.res, Kind: indices.KindFleetHead, Type: "cpu"}
				status, resp, err := opensearch.Raw(ctx, cl, http.MethodGet, "/"+names.Rollups(w)+"/_doc/"+indices.RollupID(&d), nil)
				if err != nil || (status != http.StatusOK && status != http.StatusNotFound) {
					t.Fatalf("get head: %d %v %s", status, err, resp)
				}
				var out struct {
					Found  bool              `json:"found"`
					Source indices.RollupDoc `json:"_source"`
				}
				if err := json.Unmarshal(resp, &out); err != nil {
					t.Fatal(err)
				}
				return out.Source, out.Found
			}
			check := func(w time.Time, trees ...indices.RollupDoc) {
				t.Helper()
				var all indices.TreeBuilder
				var value int64
				for _, d := range trees {
					if err := all.AddTree(d.Tree, indices.TreeLimits{}); err != nil {
						t.Fatal(err)
					}
					value += d.Value
				}
				got, ok := head(w)
				if !ok || got.Value != value || got.Value != all.Total() || got.Sources == "" || string(got.Tree) != string(all.EncodeHead(indices.HeadNodes)) {
					t.Fatalf("head of %s: found %v value %d sources %q, want the trees' %d", w.Format("15:04"), ok, got.Value, got.Sources, value)
				}
			}
			for _, w := range windows {
				want := settled(w) && !w.Before(recentFrom)
				if _, ok := head(w); ok != want {
					t.Fatalf("window %s: head written %v, want %v", w.Format("15:04"), ok, want)
				}
				if want {
					check(w, tree(0, w, ""), tree(1, w, ""))
				}
			}
			refresh := func() {
				t.Helper()
				if _, _, err := opensearch.Raw(ctx, cl, http.MethodPost, "/"+names.Prefix+"*/_refresh", nil); err != nil {
					t.Fatal(err)
				}
			}
			refresh()
			if n, err := c.ApplyWindows(ctx); err != nil || n != 0 {
				t.Fatalf("second pass wrote %d (%v), want 0", n, err)
			}
			// A late profile rewrites partition 1's tree of the last
			// settled window: its head is rewritten with the new frames,
			// and no other.
			w := lastSettled
			before, _ := head(w)
			rolluptest.Put(t, cl, names, tree(1, w, "-late"))
			if n, err := c.ApplyWindows(ctx); err != nil || n != 1 {
				t.Fatalf("pass after a rewrite wrote %d (%v), want 1", n, err)
			}
			check(w, tree(0, w, ""), tree(1, w, "-late"))
			if after, _ := head(w); after.Sources == before.Sources {
				t.Fatal("head sources did not change")
			}
			// The lifecycle pass writes the older windows' heads and
			// today's settled hours' (none: no hour trees).
			refresh()
			if n, err := c.Apply(ctx); err != nil || n != tc.older {
				t.Fatalf("Apply wrote %d (%v), want %d (the windows from %s)", n, err, tc.older, tc.first.Format("15:04"))
			}
			check(windows[0], tree(0, windows[0], ""), tree(1, windows[0], ""))
		})
	}
}

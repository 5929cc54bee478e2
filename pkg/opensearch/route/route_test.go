package route

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
)

// testNode is a client of the real node and a prefix of the test's own,
// whose indices and templates are removed at the end.
func testNode(ctx context.Context, t *testing.T) (*opensearchapi.Client, string) {
	t.Helper()
	cl, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{testenv.OpenSearchURL(t)}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	prefix := testenv.Name(t, "t-") + "-"
	t.Cleanup(func() { opensearch.RemovePrefix(context.Background(), cl, prefix) })
	return cl, prefix
}

func sampleDoc(t *testing.T, d indices.SampleDoc, ids []string, values ...int64) indices.SampleDoc {
	t.Helper()
	if err := d.SetStacks(ids, values); err != nil {
		t.Fatal(err)
	}
	return d
}

// genDocs are n stacks, n samples over two days and n rollups over two
// months, addressed by the serving names.
func genDocs(t *testing.T, names indices.Names, n int) []bulk.Item {
	t.Helper()
	days := []time.Time{time.Date(2026, 10, 31, 10, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)}
	var items []bulk.Item
	for i := range n {
		ts := days[i%2]
		fn := fmt.Sprintf("main.f%d", i)
		stack, _ := json.Marshal(indices.StackDoc{Timestamp: ts, Frames: []indices.Frame{{Function: fn}}, Functions: []string{fn}, Leaf: fn, Depth: 1})
		sample, _ := json.Marshal(sampleDoc(t, indices.SampleDoc{Timestamp: ts, Type: "cpu", Host: fmt.Sprintf("h%d", i), Service: "s", Value: 10, Count: 1}, []string{fn}, 10))
		rollup, _ := json.Marshal(indices.RollupDoc{Timestamp: ts, Resolution: "1m", Kind: "service", Type: "cpu", Service: "s", Host: fmt.Sprintf("h%d", i), Value: 10})
		id := fmt.Sprint(i)
		items = append(items,
			bulk.Item{Index: names.Stacks(), ID: id, Doc: stack},
			bulk.Item{Index: names.Samples(ts), ID: id, Doc: sample},
			bulk.Item{Index: names.Rollups(ts), ID: id, Doc: rollup})
	}
	return items
}

func write(ctx context.Context, t *testing.T, w Writer, items []bulk.Item) {
	t.Helper()
	rejected, err := w.Write(ctx, items)
	if err != nil || len(rejected) > 0 {
		t.Fatalf("write: %v, rejected %v", err, rejected)
	}
}

// errShardsFailed is a count some shards of which failed or went missing:
// OpenSearch says so in _shards, the answer is not data.
var errShardsFailed = errors.New("shards failed")

// counts are the documents the readers' names find: stacks, samples-*, rollups-*.
func counts(ctx context.Context, cl *opensearchapi.Client, names indices.Names) ([3]int64, error) {
	var out [3]int64
	for i, target := range names.AliasPatterns() {
		status, body, err := opensearch.Raw(ctx, cl, http.MethodGet, "/"+target+"/_count?ignore_unavailable=true&allow_no_indices=true", nil)
		if err != nil {
			return out, err
		}
		if status == http.StatusServiceUnavailable && strings.Contains(string(body), "all shards failed") {
			return out, fmt.Errorf("count %s: %w: %s", target, errShardsFailed, body)
		}
		if status != http.StatusOK {
			return out, fmt.Errorf("count %s: HTTP %d: %s", target, status, body)
		}
		var c struct {
			Count  int64 `json:"count"`
			Shards struct {
				Total      int `json:"total"`
				Successful int `json:"successful"`
				Skipped    int `json:"skipped"`
				Failed     int `json:"failed"`
			} `json:"_shards"`
		}
		if err := json.Unmarshal(body, &c); err != nil {
			return out, err
		}
		// A shard of an index deleted while the search ran is neither
		// successful nor failed (ignore_unavailable): still incomplete.
		if c.Shards.Failed > 0 || c.Shards.Successful+c.Shards.Skipped < c.Shards.Total {
			return out, fmt.Errorf("count %s: %w: %s", target, errShardsFailed, body)
		}
		out[i] = c.Count
	}
	return out, nil
}

func refresh(ctx context.Context, t *testing.T, cl *opensearchapi.Client, prefix string) {
	t.Helper()
	if st, body, err := opensearch.Raw(ctx, cl, http.MethodPost, "/"+prefix+"*/_refresh", nil); err != nil || st != http.StatusOK {
		t.Fatalf("refresh: %d %s %v", st, body, err)
	}
}

// TestGenerations walks an install through generations on the real node:
// generation 0 written as before generations, generation 1 filled by a
// pinned router and swapped in (the swap deletes the generation-0 indices
// in the same request), a live router creating a new day's index and alias
// in generation 1, then generation 2 swapped in and generation 1 deleted.
// A reader counts through the serving names all along and must always see
// every document exactly once.
func TestGenerations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, prefix := testNode(ctx, t)
	names := indices.Names{Prefix: prefix}
	if _, err := opensearch.ApplyTemplates(ctx, cl, prefix, indices.Settings{Replicas: 0, RefreshInterval: "1s"}); err != nil {
		t.Fatal(err)
	}
	const n = 40
	items := genDocs(t, names, n)
	w := bulk.New(cl, bulk.Options{})

	live := New(cl, names, w, 0)
	write(ctx, t, live, items)
	refresh(ctx, t, cl, prefix)
	l, err := opensearch.ReadLayout(ctx, cl, names)
	if err != nil {
		t.Fatal(err)
	}
	if g := l.Generations(); !slices.Equal(g, []int{0}) || l.Current(names) != 0 || len(l) != 5 {
		t.Fatalf("generation 0 install: generations %v, current %d, %d indices: %v", g, l.Current(names), len(l), l)
	}
	want := [3]int64{n, n, n}

	// The reader: through the serving names, never fewer or more documents.
	var (
		reads atomic.Int64
		// The migration deletes the generation-0 indices in the swap: a
		// search running on them then loses their shards, which
		// OpenSearch reports: in _shards (successful < total) or as a 503
		// "all shards failed".
		failedOK atomic.Bool
		failed   atomic.Int64
		wrong    atomic.Value
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			got, err := counts(ctx, cl, names)
			if errors.Is(err, errShardsFailed) && failedOK.Load() {
				failed.Add(1)
				continue
			}
			if err != nil {
				wrong.Store(err.Error())
				return
			}
			reads.Add(1)
			if got != want {
				wrong.Store(fmt.Sprintf("a reader saw %v, want %v", got, want))
				return
			}
		}
	}()
	check := func(step string) {
		t.Helper()
		if w := wrong.Load(); w != nil {
			t.Fatalf("%s: %s", step, w)
		}
	}

	swap := func(to int, wantRemoved, wantMoved int) opensearch.Swap {
		t.Helper()
		pinned := New(cl, names, w, to)
		write(ctx, t, pinned, items)
		refresh(ctx, t, cl, prefix)
		l, err := opensearch.ReadLayout(ctx, cl, names)
		if err != nil {
			t.Fatal(err)
		}
		s := opensearch.PlanSwap(l, names, to)
		if len(s.Removed) != wantRemoved || len(s.Moved) != wantMoved || len(s.Kept) != 0 {
			t.Fatalf("swap to %d: removed %v, moved %v, kept %v", to, s.Removed, s.Moved, s.Kept)
		}
		before := reads.Load()
		if err := s.Apply(ctx, cl); err != nil {
			t.Fatal(err)
		}
		if gen, err := opensearch.CurrentGeneration(ctx, cl, names); err != nil || gen != to {
			t.Fatalf("current generation after the swap: %d, %v; want %d", gen, err, to)
		}
		// Let the reader go on across the swap.
		for reads.Load() < before+5 {
			check("after the swap")
			time.Sleep(10 * time.Millisecond)
		}
		return s
	}

	failedOK.Store(true)
	s := swap(1, 5, 0)
	check("migration from generation 0")
	failedOK.Store(false)
	t.Logf("migration: %d exact reads, %d answers with failed shards (searches running on the deleted generation-0 indices)", reads.Load(), failed.Load())
	if !slices.Contains(s.Removed, names.Stacks()) {
		t.Fatalf("the migration did not replace the generation-0 %s: %v", names.Stacks(), s.Removed)
	}

	// A live writer (a new process) meets a new day: it creates the
	// index of generation 1 with its alias, and the reader sees the document.
	day := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	stack, _ := json.Marshal(indices.StackDoc{Timestamp: day, Functions: []string{"x"}, Leaf: "x", Depth: 1})
	sample, _ := json.Marshal(sampleDoc(t, indices.SampleDoc{Timestamp: day, Type: "cpu", Host: "new", Service: "s", Value: 1}, []string{"x"}, 1))
	close(stop)
	wg.Wait()
	write(ctx, t, New(cl, names, w, 0), []bulk.Item{{Index: names.Stacks(), ID: "new", Doc: stack}, {Index: names.Samples(day), ID: "new", Doc: sample}})
	refresh(ctx, t, cl, prefix)
	if got, err := counts(ctx, cl, names); err != nil || got != [3]int64{n + 1, n + 1, n} {
		t.Fatalf("after a live write of a new day: %v, %v", got, err)
	}
	l, _ = opensearch.ReadLayout(ctx, cl, names)
	if p, ok := l.Serving(names.Samples(day)); !ok || p.Index != names.Physical(1, names.Samples(day)) {
		t.Fatalf("the new day resolves to %+v, want %s", p, names.Physical(1, names.Samples(day)))
	}
	items = append(items, bulk.Item{Index: names.Stacks(), ID: "new", Doc: stack}, bulk.Item{Index: names.Samples(day), ID: "new", Doc: sample})
	want = [3]int64{n + 1, n + 1, n}

	stop = make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			got, err := counts(ctx, cl, names)
			if errors.Is(err, errShardsFailed) && failedOK.Load() {
				failed.Add(1)
				continue
			}
			if err != nil {
				wrong.Store(err.Error())
				return
			}
			reads.Add(1)
			if got != want {
				wrong.Store(fmt.Sprintf("a reader saw %v, want %v", got, want))
				return
			}
		}
	}()
	swap(2, 0, 6)
	close(stop)
	wg.Wait()
	check("swap from generation 1 to 2")
	t.Logf("%d reads through the serving names across the swaps, all exact", reads.Load())

	deleted, kept, err := opensearch.DeleteUnserved(ctx, cl, names, 1)
	if err != nil || len(deleted) != 6 || len(kept) != 0 {
		t.Fatalf("delete generation 1: deleted %v, kept %v, %v", deleted, kept, err)
	}
	l, _ = opensearch.ReadLayout(ctx, cl, names)
	if g := l.Generations(); !slices.Equal(g, []int{2}) {
		t.Fatalf("generations left: %v, want [2]", g)
	}
	if got, err := counts(ctx, cl, names); err != nil || got != want {
		t.Fatalf("after deleting generation 1: %v, %v", got, err)
	}
	if _, _, err := opensearch.DeleteUnserved(ctx, cl, names, 0); err == nil {
		t.Fatal("opensearch.DeleteUnserved(0) did not refuse")
	}
}

// TestRetentionThroughAliases: the retention of the indexer and the rollup
// (DeleteEnded over the serving pattern, DeleteMatching by query) works on
// generation 1, whose names are aliases: the expired day's physical index
// is deleted, its alias goes with it, the other day stays.
func TestRetentionThroughAliases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, prefix := testNode(ctx, t)
	names := indices.Names{Prefix: prefix}
	if _, err := opensearch.ApplyTemplates(ctx, cl, prefix, indices.Settings{Replicas: 0, RefreshInterval: "1s"}); err != nil {
		t.Fatal(err)
	}
	items := genDocs(t, names, 10) // days 2026-10-31 and 2026-11-01
	w := bulk.New(cl, bulk.Options{})
	write(ctx, t, New(cl, names, w, 1), items)
	l, err := opensearch.ReadLayout(ctx, cl, names)
	if err != nil {
		t.Fatal(err)
	}
	if err := opensearch.PlanSwap(l, names, 1).Apply(ctx, cl); err != nil {
		t.Fatal(err)
	}
	cutoff := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC) // 2026-10-31 ended at the cutoff: not before it
	deleted, err := opensearch.DeleteEnded(ctx, cl, names.SamplesPattern(), names.IndexEnd, cutoff.Add(time.Second))
	old := names.Physical(1, names.Samples(cutoff.Add(-time.Hour)))
	if err != nil || !slices.Equal(deleted, []string{old}) {
		t.Fatalf("DeleteEnded through the aliases deleted %v, %v; want [%s]", deleted, err, old)
	}
	l, _ = opensearch.ReadLayout(ctx, cl, names)
	if _, ok := l.Serving(names.Samples(cutoff.Add(-time.Hour))); ok {
		t.Fatal("the expired day still resolves")
	}
	if _, ok := l.Serving(names.Samples(cutoff)); !ok {
		t.Fatal("the kept day no longer resolves")
	}
	refresh(ctx, t, cl, prefix)
	n, err := opensearch.DeleteMatching(ctx, cl, names.RollupsPattern(), map[string]any{"term": map[string]any{"host": "h1"}})
	if err != nil || n != 1 {
		t.Fatalf("DeleteMatching through the aliases: %d, %v; want 1", n, err)
	}
	refresh(ctx, t, cl, prefix)
	if got, err := counts(ctx, cl, names); err != nil || got != [3]int64{10, 5, 9} {
		t.Fatalf("after retention: %v, %v; want [10 5 9]", got, err)
	}
}

// TestRouterRejectedKeepsNames: a document a pinned generation's index
// refuses comes back under the name it was given, so the indexer and the
// rollup find the record it came from (their DLQ path).
func TestRouterRejectedKeepsNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, prefix := testNode(ctx, t)
	names := indices.Names{Prefix: prefix}
	if _, err := opensearch.ApplyTemplates(ctx, cl, prefix, indices.Settings{Replicas: 0, RefreshInterval: "1s"}); err != nil {
		t.Fatal(err)
	}
	items := []bulk.Item{
		{Index: names.Stacks(), ID: "good", Doc: []byte(`{"leaf":"a","depth":1}`)},
		{Index: names.Stacks(), ID: "bad", Doc: []byte(`{"leaf":"a","depth":"deep"}`)},
	}
	rejected, err := New(cl, names, bulk.New(cl, bulk.Options{}), 4).Write(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	if len(rejected) != 1 || rejected[0].Item.ID != "bad" || rejected[0].Item.Index != names.Stacks() {
		t.Fatalf("rejected %+v, want the bad document under %s", rejected, names.Stacks())
	}
	if items[0].Index != names.Stacks() {
		t.Fatalf("the caller's items were rewritten: %s", items[0].Index)
	}
	l, err := opensearch.ReadLayout(ctx, cl, names)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := l[names.Physical(4, names.Stacks())]; !ok || p.Gen != 4 || len(p.Aliases) != 0 {
		t.Fatalf("generation 4's stacks index: %+v, %v (layout %v)", p, ok, l)
	}
}

package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
	"github.com/stackstream/stackstream/services/query/internal/selector"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// TestStackRollupShapes: minute stack rollups of both shapes through the
// real OpenSearch, as an index holds them across an upgrade to rollups
// schema 3: packed windows, windows of one document per stack, and windows
// rebuilt packed after the old rollup wrote them, whose per-stack documents
// must not count again. Sums per stack and a function's series are exact.
func TestStackRollupShapes(t *testing.T) {
	cl, names := querytest.Setup(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	hour := now.Add(-time.Hour) // ended at now: not settled, read from its minutes
	var docs []querytest.Doc
	stack := func(rootFirst ...string) string {
		d, id := querytest.Stack(names, hour, rootFirst...)
		docs = append(docs, d)
		return id
	}
	a := stack("main", "a")
	b := stack("main", "b")
	c := stack("main", "c", "a")
	stackDoc := func(minute int, service, host, id string, v int64) indices.RollupDoc {
		return indices.RollupDoc{Timestamp: hour.Add(time.Duration(minute) * time.Minute), Resolution: indices.ResolutionMinute,
			Kind: indices.KindStack, Type: "cpu", Service: service, Host: host, StackIDs: []string{id}, Value: v}
	}
	// Old shape: one document per stack, as written before schema 3.
	for _, d := range []indices.RollupDoc{
		stackDoc(20, "api", "web-1", a, 1),
		stackDoc(20, "api", "web-1", c, 2),
		stackDoc(30, "api", "web-1", a, 100), // rewritten packed below
		stackDoc(30, "api", "web-1", b, 100), // rewritten packed below
		stackDoc(30, "api", "web-2", b, 1000),
		stackDoc(40, "db", "web-1", b, 40),
		stackDoc(40, "api", "web-1", b, 500), // the last window of stack documents, rewritten packed below
	} {
		docs = append(docs, querytest.Rollup(names, d))
	}
	docs = append(docs, querytest.StackRollups(names, []indices.RollupDoc{
		stackDoc(10, "api", "web-1", a, 10),
		stackDoc(10, "api", "web-1", b, 20),
		stackDoc(30, "api", "web-1", a, 5),
		stackDoc(30, "api", "web-1", c, 7),
		stackDoc(40, "api", "web-1", a, 4),
	})...)
	querytest.Index(t, cl, names, docs)

	s := store.New(cl, names, store.Options{Now: func() time.Time { return now }, RawMaxRange: time.Minute})
	ctx := context.Background()
	sel := store.Selection{Type: "cpu", Range: store.TimeRange{From: hour, To: now, Now: now}}
	for _, c := range []struct {
		name, selector string
		want           map[string]int64
	}{
		{"all", `{}`, map[string]int64{a: 10 + 1 + 5 + 4, b: 20 + 1000 + 40, c: 2 + 7}},
		{"old only", `{host="web-2"}`, map[string]int64{b: 1000}},
		{"packed over old", `{service="api",host="web-1"}`, map[string]int64{a: 10 + 1 + 5 + 4, b: 20, c: 2 + 7}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sel := sel
			var err error
			if sel.Selector, err = selector.Parse(c.selector); err != nil {
				t.Fatal(err)
			}
			sv, err := s.StackValues(ctx, sel)
			if err != nil {
				t.Fatal(err)
			}
			var total int64
			for _, v := range c.want {
				total += v
			}
			if sv.Source != "rollups" || sv.Total != total || len(sv.Values) != len(c.want) {
				t.Fatalf("from %s: total %d, %v; want %d, %v", sv.Source, sv.Total, sv.Values, total, c.want)
			}
			for id, v := range c.want {
				if sv.Values[id] != v {
					t.Fatalf("stack %s: %d, want %d (%v)", id, sv.Values[id], v, sv.Values)
				}
			}
		})
	}

	// Function a is in stacks a and c: per 10 minutes, the packed window's
	// values of those stacks only, and none of the documents it replaced.
	points, source, err := s.FunctionSeries(ctx, sel, 10*time.Minute, "a")
	if err != nil {
		t.Fatal(err)
	}
	step := float64(10 * time.Minute)
	want := [][2]float64{
		{float64(hour.Add(10 * time.Minute).UnixMilli()), 10 / step},
		{float64(hour.Add(20 * time.Minute).UnixMilli()), (1 + 2) / step},
		{float64(hour.Add(30 * time.Minute).UnixMilli()), (5 + 7) / step},
		{float64(hour.Add(40 * time.Minute).UnixMilli()), 4 / step},
	}
	if source != "rollups" || len(points) != len(want) {
		t.Fatalf("series of a from %s: %v, want %v", source, points, want)
	}
	for i := range points {
		if points[i] != want[i] {
			t.Fatalf("series of a: %v, want %v", points, want)
		}
	}
}

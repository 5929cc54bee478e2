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

// TestFunctionsFromMinuteStacks: the rollup writes function documents per
// hour only, so a long range's edge minutes are read from the minute stack
// documents. A function's search total and its series are the hourly
// function documents of the whole hours plus the minute stacks holding it
// (each stack counted once under recursion), exact, and a function found
// only in the edges still gets its hours' total.
func TestFunctionsFromMinuteStacks(t *testing.T) {
	cl, names := querytest.Setup(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	from := now.Add(-10*time.Hour - 30*time.Minute) // 01:30: a partial hour first
	var docs []querytest.Doc
	stack := func(rootFirst ...string) string {
		d, id := querytest.Stack(names, from, rootFirst...)
		docs = append(docs, d)
		return id
	}
	hot := stack("main", "serve", "hot")
	rec := stack("main", "hot", "hot") // recursion: counts once
	cold := stack("main", "cold")
	zone := stack("main", "zone")
	rollup := func(d indices.RollupDoc) {
		d.Type, d.Service, d.Host = "cpu", "api", "web-1"
		docs = append(docs, querytest.Rollup(names, d))
	}
	var stacks []indices.RollupDoc
	minute := func(at time.Time, id string, v int64) {
		stacks = append(stacks, indices.RollupDoc{Timestamp: at, Resolution: "1m", Kind: indices.KindStack, Type: "cpu", Service: "api", Host: "web-1", StackIDs: []string{id}, Value: v})
	}
	// The edge before the first whole hour (02:00), and the hour in
	// progress (11:00-12:00, not settled).
	minute(from.Add(5*time.Minute), hot, 100)
	minute(from.Add(6*time.Minute), rec, 10)
	minute(from.Add(7*time.Minute), cold, 1)
	minute(from.Add(8*time.Minute), zone, 9000)
	minute(now.Add(-10*time.Minute), hot, 1000)
	// Inside whole hours: the hourly documents count, not these minutes.
	minute(from.Add(2*time.Hour), hot, 999999)
	hour := from.Add(30 * time.Minute).Add(time.Hour) // 03:00
	rollup(indices.RollupDoc{Timestamp: hour, Resolution: "1h", Kind: "function", Function: "hot", Self: 5000, Total: 5000})
	rollup(indices.RollupDoc{Timestamp: hour, Resolution: "1h", Kind: "function", Function: "main", Total: 5050})
	rollup(indices.RollupDoc{Timestamp: hour, Resolution: "1h", Kind: "function", Function: "cold", Self: 50, Total: 50})
	rollup(indices.RollupDoc{Timestamp: hour, Resolution: "1h", Kind: "function", Function: "zone", Self: 100, Total: 100})
	docs = append(docs, querytest.StackRollups(names, stacks)...)
	querytest.Index(t, cl, names, docs)

	s := store.New(cl, names, store.Options{Now: func() time.Time { return now }})
	sel := store.Selection{Type: "cpu", Range: store.TimeRange{From: from, To: now, Now: now}}
	ctx := context.Background()
	got, err := s.FunctionRollups(ctx, sel, "o", 10) // hot, cold, zone
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Match{
		{Kind: "function", Name: "zone", Value: 100 + 9000},
		{Kind: "function", Name: "hot", Value: 5000 + 100 + 10 + 1000},
		{Kind: "function", Name: "cold", Value: 50 + 1},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("search o: %+v, want %+v", got, want)
	}
	// The hours' top 1 is hot; the edges lift zone past it, and zone's
	// hours are read too.
	got, err = s.FunctionRollups(ctx, sel, "o", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != want[0] {
		t.Fatalf("search o, limit 1: %+v, want %+v", got, want[0])
	}
	// Limit 1 over the hours' top (main, by total) must still add the
	// edges: main 5050 + 100 + 10 + 1 + 9000 + 1000.
	got, err = s.FunctionRollups(ctx, sel, "ma", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "main" || got[0].Value != 5050+100+10+1+9000+1000 {
		t.Fatalf("search ma: %+v", got)
	}

	points, source, err := s.FunctionSeries(ctx, sel, time.Hour, "hot")
	if err != nil {
		t.Fatal(err)
	}
	h := float64(time.Hour)
	wantPoints := [][2]float64{
		{float64(from.Truncate(time.Hour).UnixMilli()), 110 / h},
		{float64(hour.UnixMilli()), 5000 / h},
		{float64(now.Add(-time.Hour).UnixMilli()), 1000 / h},
	}
	if source != "rollups" || len(points) != len(wantPoints) {
		t.Fatalf("series of hot from %s: %v, want %v", source, points, wantPoints)
	}
	for i := range points {
		if points[i] != wantPoints[i] {
			t.Fatalf("series of hot: %v, want %v", points, wantPoints)
		}
	}
	// A step under an hour reads every minute per stack; a selector
	// naming another host finds nothing in the rollups.
	points, _, err = s.FunctionSeries(ctx, sel, 10*time.Minute, "hot")
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, p := range points {
		sum += p[1] * float64(10*time.Minute)
	}
	if sum != 100+10+999999+1000 {
		t.Fatalf("10-minute series of hot sums to %v: %v", sum, points)
	}
	other, err := selector.Parse(`{host="web-2"}`)
	if err != nil {
		t.Fatal(err)
	}
	sel.Selector = other
	points, _, err = s.FunctionSeries(ctx, sel, time.Hour, "hot")
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 0 {
		t.Fatalf("series of hot on web-2: %v", points)
	}
}

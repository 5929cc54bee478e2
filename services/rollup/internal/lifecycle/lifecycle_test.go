package lifecycle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/rollup/internal/daytrees"
	"github.com/stackstream/stackstream/services/rollup/internal/rolluptest"
)

// TestApply writes minute, 10-minute and hourly rollups over four months
// into the real OpenSearch and applies 20 days for minutes and 45 for hours
// on 2026-12-10: the months that ended more than 45 days ago go whole,
// minute and 10-minute rollups older than 20 days go, everything else
// stays.
func TestApply(t *testing.T) {
	ctx := context.Background()
	cl, names := rolluptest.Rollups(t, "lc-")
	day := func(s string) time.Time {
		d, err := time.Parse("2006-01-02T15", s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	var docs []indices.RollupDoc
	for _, at := range []string{"2026-09-15T10", "2026-10-20T10", "2026-11-10T10", "2026-11-25T10", "2026-12-09T10"} {
		for _, res := range []string{indices.ResolutionMinute, indices.ResolutionTenMinutes, indices.ResolutionHour} {
			docs = append(docs, indices.RollupDoc{Timestamp: day(at), Resolution: res, Kind: indices.KindService, Type: "cpu", Service: "api", Host: "h1", Value: 1})
		}
	}
	// The fleet's minute heads go with the minute documents.
	for _, at := range []string{"2026-11-10T10", "2026-11-25T10"} {
		docs = append(docs, indices.RollupDoc{Timestamp: day(at), Resolution: indices.ResolutionMinute, Kind: indices.KindFleetHead, Type: "cpu", Value: 1})
	}
	rolluptest.Put(t, cl, names, docs...)

	l := &Lifecycle{Client: cl, Names: names, MinuteDays: 20, HourlyDays: 45, Interval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return day("2026-12-10T00") }}
	r, err := l.Apply(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// September ended 70 days before; October ended 40 days before (kept).
	if len(r.Indices) != 1 || r.Indices[0] != names.Rollups(day("2026-09-15T10")) {
		t.Errorf("deleted indices %v, want only September's", r.Indices)
	}
	// Minute and 10-minute rollups before 2026-11-20: October's and
	// 2026-11-10's, its minute's fleet head too.
	if r.MinuteRollups != 5 {
		t.Errorf("deleted %d minute rollups, want 5", r.MinuteRollups)
	}
	var left []string
	for _, d := range rolluptest.Stored(t, cl, names) {
		left = append(left, d.Timestamp.Format("01-02")+"/"+d.Resolution)
	}
	slices.Sort(left)
	want := []string{"10-20/1h", "11-10/1h", "11-25/10m", "11-25/1h", "11-25/1m", "11-25/1m", "12-09/10m", "12-09/1h", "12-09/1m"}
	if fmt.Sprint(left) != fmt.Sprint(want) {
		t.Errorf("left %v, want %v", left, want)
	}

	// A second pass finds nothing more.
	if r, err := l.Apply(ctx); err != nil || len(r.Indices) != 0 || r.MinuteRollups != 0 {
		t.Errorf("second pass: %+v, %v", r, err)
	}
}

// windowTree stores one 10-minute partition tree (of 12:20 on
// 2026-11-28) and returns the window's start and a check of its fleet
// head being written.
func windowTree(t *testing.T, prefix string) (*opensearchapi.Client, indices.Names, time.Time, func() bool) {
	t.Helper()
	cl, names := rolluptest.Rollups(t, prefix)
	w := time.Date(2026, 11, 28, 12, 20, 0, 0, time.UTC)
	var b indices.TreeBuilder
	b.Add([]indices.TreeFrame{{Name: "main"}, {Name: "f"}}, 5)
	rolluptest.Put(t, cl, names, indices.RollupDoc{Timestamp: w, Resolution: indices.ResolutionTenMinutes, Kind: indices.KindPartitionTree, Type: "cpu", Value: 5, Tree: b.Encode()})
	head := indices.RollupDoc{Timestamp: w, Resolution: indices.ResolutionTenMinutes, Kind: indices.KindFleetHead, Type: "cpu"}
	return cl, names, w, func() bool {
		status, _, err := opensearch.Raw(context.Background(), cl, http.MethodGet, "/"+names.Rollups(w)+"/_doc/"+indices.RollupID(&head), nil)
		return err == nil && status == http.StatusOK
	}
}

// runUntil runs l until done reports true or 30 s have passed, and says
// whether it did.
func runUntil(t *testing.T, l *Lifecycle, done func() bool) bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- l.Run(ctx) }()
	found := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !found; time.Sleep(200 * time.Millisecond) {
		found = done()
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	return found
}

// TestRunWritesWindowHeads: Run writes the recent 10-minute windows' fleet
// heads every FleetHeadsInterval, between its hourly passes: a window
// not yet settled at the first pass gets its head from the next window
// pass.
func TestRunWritesWindowHeads(t *testing.T) {
	cl, names, w, written := windowTree(t, "lcw-")
	// The first call (the hourly pass at start) sees the window still
	// within its lateness; later calls, a settled window.
	var calls atomic.Int32
	now := func() time.Time {
		if calls.Add(1) == 1 {
			return w.Add(11 * time.Minute)
		}
		return w.Add(15 * time.Minute)
	}
	l := &Lifecycle{Client: cl, Names: names, Interval: time.Hour, FleetHeadsInterval: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return w.Add(15 * time.Minute) },
		DayTrees: &daytrees.Compactor{Client: cl, Names: names, Days: 1, Now: now}}
	if !runUntil(t, l, written) {
		t.Fatalf("no window head written in 30 s (%d compactor calls)", calls.Load())
	}
}

// TestRunOnlyWhileLeading: an instance that does not lead (another owns
// partition 0) runs no pass; once it leads, the fleet heads pass runs
// within its interval.
func TestRunOnlyWhileLeading(t *testing.T) {
	cl, names, w, written := windowTree(t, "lcl-")
	var leads atomic.Bool
	var passes atomic.Int32
	now := func() time.Time { passes.Add(1); return w.Add(15 * time.Minute) }
	l := &Lifecycle{Client: cl, Names: names, Interval: time.Hour, FleetHeadsInterval: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: now, Leads: leads.Load,
		DayTrees: &daytrees.Compactor{Client: cl, Names: names, Days: 1, Now: now}}
	// Six fleet heads intervals without leading, then leading.
	start := time.Now()
	found := runUntil(t, l, func() bool {
		if leads.Load() {
			return written()
		}
		if n := passes.Load(); n != 0 || written() {
			t.Errorf("an instance that does not lead ran passes (%d clock reads, head written %v)", n, written())
			return true
		}
		leads.Store(time.Since(start) > 3*time.Second)
		return false
	})
	if !found {
		t.Fatalf("no window head written in 30 s (%d clock reads)", passes.Load())
	}
}

// TestMinuteTrees: minute partition trees and partition heads of minutes
// older than MinuteTreeRetention are deleted once the compactor has
// written their minutes' fleet heads: by the fleet heads pass for the
// minutes it covers (daytrees.RecentMinutes), by the hourly pass for
// older ones; the fleet's minute heads, recent minute trees and 10-minute
// trees stay.
func TestMinuteTrees(t *testing.T) {
	ctx := context.Background()
	cl, names := rolluptest.Rollups(t, "lcm-")
	at := func(hm string) time.Time {
		d, err := time.Parse("2006-01-02 15:04", "2026-11-28 "+hm)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	now := at("12:41")
	var b indices.TreeBuilder
	b.Add([]indices.TreeFrame{{Name: "main"}, {Name: "f"}}, 5)
	tree := indices.Deflate(b.Encode())
	doc := func(w time.Time, res, kind string, p int32) indices.RollupDoc {
		return indices.RollupDoc{Timestamp: w, Resolution: res, Kind: kind, Type: "cpu", Partition: p, Value: 5, Tree: tree}
	}
	// The minute 08:00 is older than the fleet heads pass looks (3 h),
	// 10:00 past the retention (2 h) but within it, 12:00 recent; 10:00
	// is also a 10-minute window.
	old, past, recent := at("08:00"), at("10:00"), at("12:00")
	var docs []indices.RollupDoc
	for _, w := range []time.Time{old, past, recent} {
		docs = append(docs, doc(w, indices.ResolutionMinute, indices.KindPartitionTree, 0), doc(w, indices.ResolutionMinute, indices.KindPartitionTree, 1),
			doc(w, indices.ResolutionMinute, indices.KindPartitionHead, 0))
	}
	docs = append(docs, doc(past, indices.ResolutionTenMinutes, indices.KindPartitionTree, 0), doc(past, indices.ResolutionTenMinutes, indices.KindPartitionHead, 0))
	rolluptest.Put(t, cl, names, docs...)
	clock := func() time.Time { return now }
	l := &Lifecycle{Client: cl, Names: names, MinuteTreeRetention: 2 * time.Hour, Interval: time.Hour, FleetHeadsInterval: time.Minute,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock,
		DayTrees: &daytrees.Compactor{Client: cl, Names: names, Days: 1, Now: clock}}
	// left lists what is stored, as window/resolution/kind/partition.
	left := func() []string {
		t.Helper()
		var out []string
		for _, d := range rolluptest.Stored(t, cl, names) {
			out = append(out, fmt.Sprintf("%s/%s/%s/%d", d.Timestamp.Format("15:04"), d.Resolution, d.Kind, d.Partition))
		}
		slices.Sort(out)
		return out
	}
	// The fleet heads pass: the heads of 10:00 and 12:00 (and of the
	// window 10:00), then 10:00's minute trees go; 08:00's stay for the
	// hourly pass.
	if n, err := l.applyWindowHeads(ctx); err != nil || n != 3 {
		t.Fatalf("fleet heads pass wrote %d (%v), want 3", n, err)
	}
	want := []string{
		"08:00/1m/partition_head/0", "08:00/1m/partition_tree/0", "08:00/1m/partition_tree/1",
		"10:00/10m/fleet_head/0", "10:00/10m/partition_head/0", "10:00/10m/partition_tree/0", "10:00/1m/fleet_head/0",
		"12:00/1m/fleet_head/0", "12:00/1m/partition_head/0", "12:00/1m/partition_tree/0", "12:00/1m/partition_tree/1",
	}
	if got := left(); !slices.Equal(got, want) {
		t.Fatalf("after the fleet heads pass: %v, want %v", got, want)
	}
	// The hourly pass: 08:00's head, then its trees go.
	r, err := l.Apply(ctx)
	if err != nil || r.DayTrees != 1 || r.MinuteTrees != 3 {
		t.Fatalf("hourly pass: %+v, %v; want 1 head written, 3 minute trees and heads deleted", r, err)
	}
	want = append([]string{"08:00/1m/fleet_head/0"}, want[3:]...)
	if got := left(); !slices.Equal(got, want) {
		t.Fatalf("after the hourly pass: %v, want %v", got, want)
	}
	if r, err := l.Apply(ctx); err != nil || r.DayTrees != 0 || r.MinuteTrees != 0 {
		t.Fatalf("second hourly pass: %+v, %v; want nothing", r, err)
	}
}

package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/rollup/internal/daytrees"
)

// TestApply writes minute, 10-minute and hourly rollups over four months
// into the real OpenSearch and applies 20 days for minutes and 45 for hours
// on 2026-12-10: the months that ended more than 45 days ago go whole,
// minute and 10-minute rollups older than 20 days go, everything else
// stays.
func TestApply(t *testing.T) {
	ctx := context.Background()
	cl, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{testenv.OpenSearchURL(t)}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	names := indices.Names{Prefix: testenv.Name(t, "lc-") + "-"}
	t.Cleanup(func() { opensearch.RemovePrefix(context.Background(), cl, names.Prefix) })
	if _, err := opensearch.ApplyTemplates(ctx, cl, names.Prefix, indices.DefaultSettings); err != nil {
		t.Fatal(err)
	}
	day := func(s string) time.Time {
		d, err := time.Parse("2006-01-02T15", s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	var bulk bytes.Buffer
	add := func(at time.Time, res string) {
		d := indices.RollupDoc{Timestamp: at, Resolution: res, Kind: indices.KindService, Type: "cpu", Service: "api", Host: "h1", Value: 1}
		fmt.Fprintf(&bulk, `{"index":{"_index":%q,"_id":%q}}`+"\n", names.Rollups(at), indices.RollupID(&d))
		b, _ := json.Marshal(d)
		bulk.Write(append(b, '\n'))
	}
	for _, at := range []string{"2026-09-15T10", "2026-10-20T10", "2026-11-10T10", "2026-11-25T10", "2026-12-09T10"} {
		add(day(at), indices.ResolutionMinute)
		add(day(at), indices.ResolutionTenMinutes)
		add(day(at), indices.ResolutionHour)
	}
	status, body, err := opensearch.Raw(ctx, cl, http.MethodPost, "/_bulk?refresh=true", bulk.Bytes())
	if err != nil || status != http.StatusOK || bytes.Contains(body, []byte(`"errors":true`)) {
		t.Fatalf("bulk: %v %d %.500s", err, status, body)
	}

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
	// 2026-11-10's.
	if r.MinuteRollups != 4 {
		t.Errorf("deleted %d minute rollups, want 4", r.MinuteRollups)
	}
	opensearch.Raw(ctx, cl, http.MethodPost, "/"+names.RollupsPattern()+"/_refresh", nil)
	status, body, err = opensearch.Raw(ctx, cl, http.MethodGet, "/"+names.RollupsPattern()+"/_search?size=100&sort=@timestamp:asc,resolution:asc", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("search: %v %d %.300s", err, status, body)
	}
	var resp struct {
		Hits struct {
			Hits []struct {
				Source indices.RollupDoc `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	json.Unmarshal(body, &resp)
	var left []string
	for _, h := range resp.Hits.Hits {
		left = append(left, h.Source.Timestamp.Format("01-02")+"/"+h.Source.Resolution)
	}
	want := []string{"10-20/1h", "11-10/1h", "11-25/10m", "11-25/1h", "11-25/1m", "12-09/10m", "12-09/1h", "12-09/1m"}
	if fmt.Sprint(left) != fmt.Sprint(want) {
		t.Errorf("left %v, want %v", left, want)
	}

	// A second pass finds nothing more.
	if r, err := l.Apply(ctx); err != nil || len(r.Indices) != 0 || r.MinuteRollups != 0 {
		t.Errorf("second pass: %+v, %v", r, err)
	}
}

// TestRunWritesWindowHeads: Run writes the recent 10-minute windows' fleet
// heads every FleetHeadsInterval, between its hourly passes: a window
// not yet settled at the first pass gets its head from the next window
// pass.
func TestRunWritesWindowHeads(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{testenv.OpenSearchURL(t)}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	names := indices.Names{Prefix: testenv.Name(t, "lcw-") + "-"}
	t.Cleanup(func() { opensearch.RemovePrefix(context.Background(), cl, names.Prefix) })
	if _, err := opensearch.ApplyTemplates(ctx, cl, names.Prefix, indices.DefaultSettings); err != nil {
		t.Fatal(err)
	}
	w := time.Date(2026, 11, 28, 12, 20, 0, 0, time.UTC)
	var b indices.TreeBuilder
	b.Add([]indices.TreeFrame{{Name: "main"}, {Name: "f"}}, 5)
	tree := indices.RollupDoc{Timestamp: w, Resolution: indices.ResolutionTenMinutes, Kind: indices.KindPartitionTree, Type: "cpu", Value: 5, Tree: b.Encode()}
	raw, _ := json.Marshal(&tree)
	if status, resp, err := opensearch.Raw(ctx, cl, http.MethodPut, "/"+names.Rollups(w)+"/_doc/"+indices.RollupID(&tree)+"?refresh=true", raw); err != nil || status/100 != 2 {
		t.Fatalf("put: %d %v %s", status, err, resp)
	}
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
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	head := indices.RollupDoc{Timestamp: w, Resolution: indices.ResolutionTenMinutes, Kind: indices.KindFleetHead, Type: "cpu"}
	found := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !found; time.Sleep(200 * time.Millisecond) {
		status, _, err := opensearch.Raw(ctx, cl, http.MethodGet, "/"+names.Rollups(w)+"/_doc/"+indices.RollupID(&head), nil)
		found = err == nil && status == http.StatusOK
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatalf("no window head written in 30 s (%d compactor calls)", calls.Load())
	}
}

package api_test

import (
	"fmt"
	"math"
	"net/url"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// TestSeriesWindows: a CPU chart of whole 10-minute or hour steps ranks
// its groups from the settled hours' hourly documents and the closed
// 10-minute windows after them, reads its top lines from 10-minute (or
// hourly) documents and "other" as the selection's total less the lines;
// every point of every line and of "other" equals the sum of the minutes,
// with every document complete, and when a closed window of the last hour
// has a 10-minute document behind its minutes or none, when a settled hour
// misses a 10-minute document, and when the 10-minute documents of the
// window still filling lag (read from its minutes). A service document
// without a host is in no host's line and not in "other".
func TestSeriesWindows(t *testing.T) {
	cl, names := querytest.Setup(t)
	// now is 12:00 on 11-30: hours settled until 11:00, the windows of
	// 11:00-11:50 closed (ended 5 minutes ago), 11:50 still filling.
	first := now.Add(-13 * time.Hour)
	const hosts = 15
	minutes := map[string]map[int64]int64{} // group -> minute -> value
	byService := map[string]map[int64]int64{}
	tenDoc := map[string]map[time.Time]indices.RollupDoc{} // host -> window -> its 10-minute document
	var docs []querytest.Doc
	add := func(host, service string) {
		minutes[host] = map[int64]int64{}
		if byService[service] == nil {
			byService[service] = map[int64]int64{}
		}
		tenDoc[host] = map[time.Time]indices.RollupDoc{}
		tens, hours := map[time.Time]int64{}, map[time.Time]int64{}
		h := len(minutes)
		for m := first; m.Before(now); m = m.Add(time.Minute) {
			v := int64(h)*1e9 + int64(m.Minute()%7)*1e8 + int64(m.Hour())*1e7
			if host != "" {
				minutes[host][m.UnixMilli()] = v
			}
			byService[service][m.UnixMilli()] += v
			tens[m.Truncate(10*time.Minute)] += v
			hours[m.Truncate(time.Hour)] += v
			docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: m, Resolution: indices.ResolutionMinute, Kind: indices.KindService,
				Type: "cpu", Service: service, Host: host, Value: v, StackValue: v}))
		}
		for hr, v := range hours {
			if hr.Before(now.Add(-time.Hour)) {
				docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: hr, Resolution: indices.ResolutionHour, Kind: indices.KindService,
					Type: "cpu", Service: service, Host: host, Value: v, StackValue: v}))
			}
		}
		for w, v := range tens {
			d := indices.RollupDoc{Timestamp: w, Resolution: indices.ResolutionTenMinutes, Kind: indices.KindService,
				Type: "cpu", Service: service, Host: host, Value: v, StackValue: v}
			tenDoc[host][w] = d
			if w.Equal(now.Add(-10 * time.Minute)) {
				d.Value -= minutes[host][now.Add(-time.Minute).UnixMilli()] // still filling: behind its minutes
				d.StackValue = d.Value
			}
			docs = append(docs, querytest.Rollup(names, d))
		}
	}
	for h := range hosts {
		add(fmt.Sprintf("h-%02d", h), fmt.Sprintf("svc-%d", h%2))
	}
	add("", "svc-1") // no host
	delete(minutes, "")
	querytest.Index(t, cl, names, docs)
	base := serve(t, cl, names, api.Options{})

	check := func(t *testing.T, groupBy string, top int, from, to time.Time, step string, wantStep time.Duration) {
		t.Helper()
		groups := minutes
		if groupBy == "service" {
			groups = byService
		}
		q := url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}, "group_by": {groupBy}, "top": {fmt.Sprint(top)}}
		if step != "" {
			q.Set("step", step)
		}
		var resp api.SeriesResponse
		get(t, base, "/api/v1/series", q, &resp)
		if time.Duration(resp.StepSeconds)*time.Second != wantStep || resp.Source != "rollups" || resp.TotalSeries != len(groups) || len(resp.Series) != top+1 {
			t.Fatalf("step %ds source %s total %d lines %d, want %s, rollups, %d groups, %d lines and other", resp.StepSeconds, resp.Source, resp.TotalSeries, len(resp.Series), wantStep, len(groups), top)
		}
		// The heaviest groups are the last ones (h-14, svc-1: it has more hosts).
		var keys []string
		if groupBy == "service" {
			keys = []string{"svc-1", "svc-0"}
		} else {
			for h := hosts - 1; h >= 0; h-- {
				keys = append(keys, fmt.Sprintf("h-%02d", h))
			}
		}
		for i, s := range resp.Series {
			lineKeys := keys[top:]
			if i < top {
				lineKeys = keys[i : i+1]
				if s.Labels[groupBy] != keys[i] {
					t.Fatalf("line %d is %v, want %s", i, s.Labels, keys[i])
				}
			} else if !s.Other || s.Folded != len(groups)-top {
				t.Fatalf("last line %+v, want other of %d groups", s.Labels, len(groups)-top)
			}
			w := minuteChart(groups, from, to, wantStep, lineKeys)
			if len(s.Points) != len(w) {
				t.Fatalf("%v: %d points, want %d", s.Labels, len(s.Points), len(w))
			}
			for _, p := range s.Points {
				if exp, ok := w[int64(p[0])]; !ok || math.Abs(p[1]-exp) > 1e-9*exp {
					t.Fatalf("%v at %s: %v cores, want %v", s.Labels, time.UnixMilli(int64(p[0])).UTC().Format("01-02 15:04"), p[1], exp)
				}
			}
		}
	}
	charts := func(t *testing.T) {
		t.Helper()
		for _, tc := range []struct {
			from, to time.Time
			step     string
			wantStep time.Duration
		}{
			{now.Add(-6 * time.Hour), now, "10m", 10 * time.Minute},
			{now.Add(-6 * time.Hour), now, "30m", 30 * time.Minute},
			{now.Add(-6 * time.Hour), now, "1h", time.Hour},
			{now.Add(-12 * time.Hour), now, "", 10 * time.Minute},
			// Parts of hours at both ends, all of them before now.
			{now.Add(-5*time.Hour - 40*time.Minute), now.Add(-20 * time.Minute), "10m", 10 * time.Minute},
			// No settled hour.
			{now.Add(-50 * time.Minute), now, "10m", 10 * time.Minute},
		} {
			check(t, "host", 3, tc.from, tc.to, tc.step, tc.wantStep)
		}
		check(t, "service", 1, now.Add(-6*time.Hour), now, "10m", 10*time.Minute)
		check(t, "service", 1, now.Add(-6*time.Hour), now, "1h", time.Hour)
	}
	t.Run("complete", charts)

	reindex := func(d indices.RollupDoc) { querytest.Index(t, cl, names, []querytest.Doc{querytest.Rollup(names, d)}) }
	for _, tc := range []struct{ name, host string }{
		{"a closed window behind its minutes", "h-05"},
		{"a closed window of a top line behind its minutes", "h-14"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tenDoc[tc.host][now.Add(-40*time.Minute)] // 11:20
			stale := d
			stale.Value -= minutes[tc.host][now.Add(-35*time.Minute).UnixMilli()]
			stale.StackValue = stale.Value
			reindex(stale)
			defer reindex(d)
			charts(t)
		})
	}
	t.Run("a closed window missing a 10-minute document", func(t *testing.T) {
		d := tenDoc["h-07"][now.Add(-50*time.Minute)] // 11:10
		deleteRollups(t, cl, names, map[string]any{"ids": map[string]any{"values": []string{querytest.Rollup(names, d).ID}}})
		defer reindex(d)
		charts(t)
	})
	t.Run("a settled hour missing a 10-minute document", func(t *testing.T) {
		d := tenDoc["h-02"][now.Add(-3*time.Hour+10*time.Minute)] // 09:10
		deleteRollups(t, cl, names, map[string]any{"ids": map[string]any{"values": []string{querytest.Rollup(names, d).ID}}})
		defer reindex(d)
		charts(t)
	})
}

// minuteChart sums the minutes (group -> unix ms -> value) of keys in
// [from, to) per step, as cores: the brute-force chart.
func minuteChart(minutes map[string]map[int64]int64, from, to time.Time, step time.Duration, keys []string) map[int64]float64 {
	out := map[int64]float64{}
	for _, k := range keys {
		for ms, v := range minutes[k] {
			if t := time.UnixMilli(ms); !t.Before(from) && t.Before(to) {
				out[t.Truncate(step).UnixMilli()] += float64(v)
			}
		}
	}
	for b := range out {
		out[b] /= float64(step)
	}
	return out
}

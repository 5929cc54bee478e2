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

// TestSeriesTenMinutes: charts with steps of whole 10 minutes read the
// rollup's 10-minute service documents where they are complete and the
// minutes elsewhere, and equal the sums of the minutes (top lines and
// "other") over ranges with 10-minute documents, without them (written
// before the rollup wrote them), and across both; the window still
// filling (its 10-minute document behind its minutes) is read from its
// minutes, and so is a range holding a settled hour that misses one
// 10-minute document.
func TestSeriesTenMinutes(t *testing.T) {
	cl, names := querytest.Setup(t)
	// now is 12:00 on 11-30: minutes from 11-29 18:00, 10-minute documents
	// from 11-30 00:00 (the rollup's upgrade), hours settled until 11:00.
	first, upgrade := now.Add(-18*time.Hour), now.Add(-12*time.Hour)
	const hosts = 15
	minutes := map[string]map[int64]int64{} // host -> minute -> value
	var docs []querytest.Doc
	for h := range hosts {
		host, service := fmt.Sprintf("h-%02d", h), fmt.Sprintf("svc-%d", h%2)
		minutes[host] = map[int64]int64{}
		tens := map[time.Time]int64{}
		hours := map[time.Time]int64{}
		for m := first; m.Before(now); m = m.Add(time.Minute) {
			v := int64(h+1)*1e9 + int64(m.Minute()%7)*1e8
			minutes[host][m.UnixMilli()] = v
			tens[m.Truncate(10*time.Minute)] += v
			hours[m.Truncate(time.Hour)] += v
			docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: m, Resolution: indices.ResolutionMinute, Kind: indices.KindService,
				Type: "cpu", Service: service, Host: host, Value: v, StackValue: v, Cores: float64(v) / float64(time.Minute)}))
		}
		for hr, v := range hours {
			if hr.Before(now.Add(-time.Hour)) { // the rollup wrote the settled hours
				docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: hr, Resolution: indices.ResolutionHour, Kind: indices.KindService,
					Type: "cpu", Service: service, Host: host, Value: v, StackValue: v, Cores: float64(v) / float64(time.Hour)}))
			}
		}
		for w, v := range tens {
			switch {
			case w.Before(upgrade):
				continue // before the upgrade
			case h == 3 && w.Equal(now.Add(-3*time.Hour-40*time.Minute)):
				continue // 08:20 missing: hour 08:00 from minutes
			case w.Equal(now.Add(-10 * time.Minute)):
				v -= minutes[host][now.Add(-time.Minute).UnixMilli()] // 11:50 still filling: behind its minutes
			}
			docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: w, Resolution: "10m", Kind: indices.KindService,
				Type: "cpu", Service: service, Host: host, Value: v, StackValue: v, Cores: float64(v) / float64(10*time.Minute)}))
		}
	}
	querytest.Index(t, cl, names, docs)
	base := serve(t, cl, names, api.Options{})

	// want is the chart of the minutes: per host, the sum of its minutes
	// in each step over step.
	want := func(from, to time.Time, step time.Duration, keys []string) map[int64]float64 {
		return minuteChart(minutes, from, to, step, keys)
	}
	check := func(t *testing.T, from, to time.Time, step string, wantStep time.Duration) {
		t.Helper()
		q := url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}, "group_by": {"host"}, "top": {"3"}}
		if step != "" {
			q.Set("step", step)
		}
		var resp api.SeriesResponse
		get(t, base, "/api/v1/series", q, &resp)
		if time.Duration(resp.StepSeconds)*time.Second != wantStep || resp.Source != "rollups" || resp.TotalSeries != hosts || len(resp.Series) != 4 {
			t.Fatalf("step %ds source %s total %d lines %d, want %s, rollups, %d hosts, 3 lines and other", resp.StepSeconds, resp.Source, resp.TotalSeries, len(resp.Series), wantStep, hosts)
		}
		var rest []string
		for h := range hosts - 3 {
			rest = append(rest, fmt.Sprintf("h-%02d", h))
		}
		for i, s := range resp.Series {
			keys := rest
			if i < 3 {
				keys = []string{fmt.Sprintf("h-%02d", hosts-1-i)}
				if s.Labels["host"] != keys[0] {
					t.Fatalf("line %d is %v, want %s", i, s.Labels, keys[0])
				}
			} else if !s.Other || s.Folded != hosts-3 {
				t.Fatalf("last line %+v, want other of %d hosts", s.Labels, hosts-3)
			}
			w := want(from, to, wantStep, keys)
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
	t.Run("10-minute documents, the last window still filling", func(t *testing.T) {
		for _, step := range []string{"10m", "30m", "5m", "1h"} {
			d, _ := time.ParseDuration(step)
			check(t, now.Add(-3*time.Hour), now, step, d)
		}
	})
	t.Run("a settled hour missing a 10-minute document", func(t *testing.T) {
		for _, step := range []string{"10m", "30m"} {
			d, _ := time.ParseDuration(step)
			check(t, now.Add(-6*time.Hour), now.Add(-2*time.Hour), step, d)
		}
	})
	t.Run("old data", func(t *testing.T) {
		check(t, first, upgrade, "10m", 10*time.Minute)
	})
	t.Run("mixed, automatic step", func(t *testing.T) {
		check(t, first.Add(2*time.Hour), now, "", 10*time.Minute)
	})

	// Which documents answer: a settled hour's complete 10-minute
	// documents are read, so moving value between two of one host's
	// windows (the hour's sum unchanged) shows in a 10-minute chart and
	// not in a 5-minute one.
	moved := int64(1e12)
	var swap []querytest.Doc
	for i, w := range []time.Time{now.Add(-2 * time.Hour), now.Add(-2*time.Hour + 10*time.Minute)} {
		var v int64
		for m := w; m.Before(w.Add(10 * time.Minute)); m = m.Add(time.Minute) {
			v += minutes["h-14"][m.UnixMilli()]
		}
		v += moved * int64(1-2*i)
		swap = append(swap, querytest.Rollup(names, indices.RollupDoc{Timestamp: w, Resolution: "10m", Kind: indices.KindService,
			Type: "cpu", Service: "svc-0", Host: "h-14", Value: v, StackValue: v, Cores: float64(v) / float64(10*time.Minute)}))
	}
	querytest.Index(t, cl, names, swap)
	t.Run("10-minute documents answer", func(t *testing.T) {
		for _, tc := range []struct {
			step string
			off  float64
		}{{"10m", float64(moved) / float64(10*time.Minute)}, {"5m", 0}} {
			q := url.Values{"from": {now.Add(-3 * time.Hour).Format(time.RFC3339)}, "to": {now.Format(time.RFC3339)}, "group_by": {"host"}, "top": {"1"}, "step": {tc.step}}
			var resp api.SeriesResponse
			get(t, base, "/api/v1/series", q, &resp)
			d, _ := time.ParseDuration(tc.step)
			w := want(now.Add(-3*time.Hour), now, d, []string{"h-14"})
			at := now.Add(-2 * time.Hour).UnixMilli()
			found := false
			for _, p := range resp.Series[0].Points {
				if int64(p[0]) == at {
					if exp := w[at] + tc.off; math.Abs(p[1]-exp) > 1e-9*exp {
						t.Fatalf("step %s at 10:00: %v cores, want %v", tc.step, p[1], exp)
					}
					found = true
				}
			}
			if !found {
				t.Fatalf("step %s: no point at 10:00", tc.step)
			}
		}
	})
}

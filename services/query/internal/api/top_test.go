package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// TestSeriesTop indexes 150 hosts of per-minute CPU rollups (host i uses
// (i+1) ms plus 1 µs per minute of the hour, so every host and minute
// differs) and 30 hosts of CPU samples with a label, and checks /series
// with top=N on the real node: the N lines are the N largest hosts in
// order, "other" is exactly the sum of the others at every step, the lines
// and other add up to the fleet's total, total_series counts every host,
// and bad values of top are 400s naming it. The rank is paged 7 groups at
// a time, so the composite paging is exercised too.
func TestSeriesTop(t *testing.T) {
	const hosts, sampleHosts = 150, 30
	cl, names := querytest.Setup(t)
	t0 := now.Truncate(time.Minute)
	// want[host][minute start] = nanoseconds.
	want := map[string]map[int64]float64{}
	var docs []querytest.Doc
	for i := 0; i < hosts; i++ {
		host := fmt.Sprintf("host-%03d", i)
		want[host] = map[int64]float64{}
		for m := 1; m <= 60; m++ {
			at := t0.Add(-time.Duration(m) * time.Minute)
			v := int64(i+1)*int64(time.Millisecond) + int64(m)*int64(time.Microsecond)
			want[host][at.UnixMilli()] = float64(v)
			docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: "1m", Kind: "service", Type: "cpu",
				Service: fmt.Sprintf("svc-%d", i%7), Host: host, Value: v}))
		}
	}
	wantSamples := map[string]map[int64]float64{}
	var samples []indices.SampleDoc
	for i := 0; i < sampleHosts; i++ {
		host := fmt.Sprintf("node-%02d", i)
		wantSamples[host] = map[int64]float64{}
		for m := 1; m <= 60; m += 3 {
			at := t0.Add(-time.Duration(m) * time.Minute)
			v := int64((i%11+1)*1000 + m)
			wantSamples[host][at.UnixMilli()] = float64(v)
			samples = append(samples, indices.SampleDoc{Timestamp: at, Type: "cpu", Host: host, Service: "batch", Value: v, Count: 1,
				Labels: map[string]string{"comm": "worker"}})
		}
	}
	docs = append(docs, querytest.Samples(names, samples...)...)
	querytest.Index(t, cl, names, docs)
	base := serve(t, cl, names, api.Options{PageSize: 7})

	const step = 5 * time.Minute
	window := func(kv ...string) url.Values {
		q := url.Values{"from": {now.Add(-time.Hour).Format(time.RFC3339)}, "to": {now.Format(time.RFC3339)}, "step": {"5m"}, "group_by": {"host"}}
		for i := 0; i < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		return q
	}
	// perStep sums want's hosts (all but skip) into step buckets, in cores.
	perStep := func(want map[string]map[int64]float64, skip map[string]bool) map[int64]float64 {
		out := map[int64]float64{}
		for h, pts := range want {
			if skip[h] {
				continue
			}
			for ms, v := range pts {
				out[time.UnixMilli(ms).Truncate(step).UnixMilli()] += v / float64(step)
			}
		}
		return out
	}
	check := func(t *testing.T, s api.SeriesResponse, want map[string]map[int64]float64, top int, source string) {
		t.Helper()
		if s.Source != source || s.TotalSeries != len(want) || len(s.Series) != top+1 {
			t.Fatalf("source %q, total_series %d, %d series; want %s, %d, %d", s.Source, s.TotalSeries, len(s.Series), source, len(want), top+1)
		}
		// The top lines: the largest hosts by total, heaviest first.
		totals := map[string]float64{}
		for h, pts := range want {
			for _, v := range pts {
				totals[h] += v
			}
		}
		shown := map[string]bool{}
		for i, ser := range s.Series[:top] {
			h := ser.Labels["host"]
			if ser.Other || h == "" || shown[h] {
				t.Fatalf("line %d: %+v is not a new host", i, ser.Labels)
			}
			shown[h] = true
			if i > 0 && totals[h] > totals[s.Series[i-1].Labels["host"]] {
				t.Fatalf("line %d %s (%v) heavier than line %d", i, h, totals[h], i-1)
			}
			for _, p := range ser.Points {
				if got, w := p[1], perStep(map[string]map[int64]float64{h: want[h]}, nil)[int64(p[0])]; !near(got, w) {
					t.Fatalf("%s at %v: %v cores, want %v", h, time.UnixMilli(int64(p[0])), got, w)
				}
			}
		}
		for h, v := range totals {
			if !shown[h] && v > totals[s.Series[top-1].Labels["host"]] {
				t.Fatalf("%s (%v) is heavier than the last line shown but folded into other", h, v)
			}
		}
		other := s.Series[top]
		if !other.Other || len(other.Labels) != 0 || other.Folded != len(want)-top {
			t.Fatalf("other line: other %v labels %v folded %d, want true, none, %d", other.Other, other.Labels, other.Folded, len(want)-top)
		}
		rest, all := perStep(want, shown), perStep(want, nil)
		if len(other.Points) != len(rest) {
			t.Fatalf("other has %d points, want %d", len(other.Points), len(rest))
		}
		for _, p := range other.Points {
			if !near(p[1], rest[int64(p[0])]) {
				t.Fatalf("other at %v: %v cores, want the rest's %v", time.UnixMilli(int64(p[0])), p[1], rest[int64(p[0])])
			}
		}
		// Lines plus other are the fleet's total at every step.
		sum := map[int64]float64{}
		for _, ser := range s.Series {
			for _, p := range ser.Points {
				sum[int64(p[0])] += p[1]
			}
		}
		for ms, v := range all {
			if !near(sum[ms], v) {
				t.Fatalf("at %v: lines and other add to %v cores, the fleet used %v", time.UnixMilli(ms), sum[ms], v)
			}
		}
	}

	for _, top := range []int{1, 10, 100} {
		t.Run(fmt.Sprintf("rollups top=%d", top), func(t *testing.T) {
			var s api.SeriesResponse
			get(t, base, "/api/v1/series", window("top", fmt.Sprint(top)), &s)
			check(t, s, want, top, "rollups")
		})
	}
	t.Run("default top is 10", func(t *testing.T) {
		var s api.SeriesResponse
		get(t, base, "/api/v1/series", window(), &s)
		check(t, s, want, 10, "rollups")
	})
	t.Run("samples top=5", func(t *testing.T) {
		var s api.SeriesResponse
		get(t, base, "/api/v1/series", window("top", "5", "query", `{comm="worker"}`), &s)
		check(t, s, wantSamples, 5, "samples")
	})
	t.Run("nothing folded", func(t *testing.T) {
		var s api.SeriesResponse
		get(t, base, "/api/v1/series", window("top", "5", "query", `{host=~"host-00[0-4]"}`), &s)
		if s.TotalSeries != 5 || len(s.Series) != 5 || s.Series[4].Other {
			t.Fatalf("5 hosts with top=5: total %d, %d series; want 5 lines and no other", s.TotalSeries, len(s.Series))
		}
	})
	// A selection listing 5000 hosts (150 real, 4850 absent): 65 KB of
	// selector, past the 32 KiB URL limit, so sent as a POST form; the
	// list is a terms query.
	list := func(n int) string {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("absent-%05d", i)
			if i < hosts {
				names[i] = fmt.Sprintf("host-%03d", i)
			}
		}
		return `{host=~"` + strings.Join(names, "|") + `"}`
	}
	t.Run("5000 hosts listed, by POST", func(t *testing.T) {
		q := window("top", "10", "query", list(5000))
		var s api.SeriesResponse
		if code := post(t, base+"/api/v1/series", q, &s); code != 200 {
			t.Fatalf("HTTP %d", code)
		}
		check(t, s, want, 10, "rollups")
		// Negated, the list leaves only the samples' node-* hosts (the
		// rollups then match nothing, so the samples are read).
		q.Set("query", strings.Replace(list(5000), "=~", "!~", 1))
		s = api.SeriesResponse{}
		if code := post(t, base+"/api/v1/series", q, &s); code != 200 || s.TotalSeries != sampleHosts {
			t.Fatalf("host!~ of every rollup host: HTTP %d, %d series in all, want %d", code, s.TotalSeries, sampleHosts)
		}
		for _, ser := range s.Series {
			if strings.HasPrefix(ser.Labels["host"], "host-") {
				t.Fatalf("host!~ of every rollup host shows %s", ser.Labels["host"])
			}
		}
	})
	t.Run("10001 hosts listed is a 400", func(t *testing.T) {
		var e errorBody
		if code := post(t, base+"/api/v1/series", window("query", list(10001)), &e); code != 400 || e.Parameter != "query" || !strings.Contains(e.Error, "more than 10000 values") {
			t.Fatalf("HTTP %d %+v, want 400 naming query and the bound", code, e)
		}
	})
	t.Run("a body over 1 MiB is a 413", func(t *testing.T) {
		var e errorBody
		if code := post(t, base+"/api/v1/series", window("query", strings.Repeat(" ", 1<<20)), &e); code != 413 {
			t.Fatalf("HTTP %d %+v, want 413", code, e)
		}
	})
	for _, bad := range []string{"0", "101", "-1", "ten", "1e3", "99999999999999999999"} {
		t.Run("top="+bad, func(t *testing.T) {
			var e errorBody
			if code := get(t, base, "/api/v1/series", window("top", bad), &e); code != 400 || e.Parameter != "top" {
				t.Fatalf("top=%s: HTTP %d %+v, want 400 naming top", bad, code, e)
			}
		})
	}
}

// post sends params as a form body and decodes the answer into out.
func post(t *testing.T, u string, params url.Values, out any) int {
	t.Helper()
	resp, err := http.PostForm(u, params)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("POST %s: HTTP %d: decode %.200q: %v", u, resp.StatusCode, body, err)
	}
	return resp.StatusCode
}

// TestSeriesRankFromHours checks that a chart of minute steps over settled
// whole hours ranks its groups from the hourly windows (a day's ranking
// reads 24 documents per group, not 1440) and draws its lines from the
// minute windows. The two disagree on purpose here: host "b" leads by its
// hourly windows, "a" by its minutes.
func TestSeriesRankFromHours(t *testing.T) {
	cl, names := querytest.Setup(t)
	hour := now.Add(-3 * time.Hour) // settled: ended 2 h before now
	var docs []querytest.Doc
	minuteNs := map[string]int64{"a": 3e9, "b": 2e9}
	hourNs := map[string]int64{"a": 60e9, "b": 90e9}
	for h, v := range minuteNs {
		for m := range 60 {
			docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: hour.Add(time.Duration(m) * time.Minute), Resolution: "1m",
				Kind: "service", Type: "cpu", Service: "svc", Host: h, Value: v}))
		}
		docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: hour, Resolution: "1h",
			Kind: "service", Type: "cpu", Service: "svc", Host: h, Value: hourNs[h]}))
	}
	querytest.Index(t, cl, names, docs)
	base := serve(t, cl, names, api.Options{})
	q := url.Values{"from": {hour.Format(time.RFC3339)}, "to": {hour.Add(time.Hour).Format(time.RFC3339)}, "group_by": {"host"}, "top": {"1"}}
	for _, step := range []string{"5m", "1h"} {
		q.Set("step", step)
		var s api.SeriesResponse
		if code := get(t, base, "/api/v1/series", q, &s); code != http.StatusOK {
			t.Fatalf("step %s: HTTP %d", step, code)
		}
		if len(s.Series) != 2 || s.Series[0].Labels["host"] != "b" || !s.Series[1].Other {
			t.Fatalf("step %s: %+v, want host b (the heavier by its hourly windows) then other", step, s.Series)
		}
		// Step 5m: b's minute windows (2 s per minute), and a's in other.
		want := map[string]float64{"5m": 2e9 / 60e9, "1h": 90e9 / 3600e9}[step]
		for _, p := range s.Series[0].Points {
			if !near(p[1], want) {
				t.Fatalf("step %s: b at %v: %v cores, want %v", step, time.UnixMilli(int64(p[0])), p[1], want)
			}
		}
	}
}

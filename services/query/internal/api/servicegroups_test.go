package api_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// TestSeriesServiceGroups: charts of whole settled hours read the hours'
// service groups documents (indices.KindServiceGroups) and answer exactly
// what the 10-minute and hourly service documents answer (every line,
// "other", the ranking and the total, compared whole with the answer
// before the documents existed and point by point with the sums of the
// minutes), for steps of 10, 20, 30 minutes, 1 and 2 hours, by host and by
// service, with selectors of =, !=, =~ and !~ lists and a group without a
// host, over whole settled hours and over a range with minutes before its
// first settled hour and an hour not settled after its last (read from
// the service documents); a document whose values were changed under the same sources shows
// (so the documents answer); an hour rewritten by a late profile (its
// minute, 10-minute and hourly documents), an hour whose 10-minute
// document alone was rewritten, a document missing, and a document made
// from part of an hour are refused, and the charts equal the minutes.
func TestSeriesServiceGroups(t *testing.T) {
	cl, names := querytest.Setup(t)
	from, to := now.Add(-8*time.Hour), now.Add(-2*time.Hour) // settled: 04:00-10:00
	type group struct{ service, host string }
	var groups []group
	for h := range 12 {
		groups = append(groups, group{fmt.Sprintf("svc-%d", h%3), fmt.Sprintf("h-%02d", h)})
	}
	groups = append(groups, group{"svc-x", ""}) // no host
	minutes := map[group]map[int64]int64{}
	doc := func(g group, at time.Time, res string, v int64) querytest.Doc {
		return querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: res, Kind: indices.KindService,
			Type: "cpu", Service: g.service, Host: g.host, Value: v, StackValue: v})
	}
	// windows are a group's 1m, 10m and 1h documents of minutes.
	windows := func(g group) []querytest.Doc {
		var docs []querytest.Doc
		tens, hours := map[time.Time]int64{}, map[time.Time]int64{}
		for ms, v := range minutes[g] {
			m := time.UnixMilli(ms).UTC()
			docs = append(docs, doc(g, m, indices.ResolutionMinute, v))
			tens[m.Truncate(10*time.Minute)] += v
			hours[m.Truncate(time.Hour)] += v
		}
		for w, v := range tens {
			docs = append(docs, doc(g, w, indices.ResolutionTenMinutes, v))
		}
		for h, v := range hours {
			docs = append(docs, doc(g, h, indices.ResolutionHour, v))
		}
		return docs
	}
	var docs []querytest.Doc
	for i, g := range groups {
		minutes[g] = map[int64]int64{}
		for m := from; m.Before(to); m = m.Add(time.Minute) {
			// Groups swap ranks from hour to hour.
			minutes[g][m.UnixMilli()] = int64(i+1)*1e9 + int64((m.Hour()*(i+3))%11)*3e8 + int64(m.Minute()%7)*1e7
		}
		docs = append(docs, windows(g)...)
	}
	querytest.Index(t, cl, names, docs)
	base := serve(t, cl, names, api.Options{})

	type chart struct {
		groupBy, step, query string
		match                func(group) bool
		rolling              bool // 04:30-10:00 at 10:10: settled 05:00-09:00
	}
	in := func(s string, list ...string) bool { return slices.Contains(list, s) }
	charts := []chart{
		{"host", "10m", "", func(group) bool { return true }, false},
		{"host", "20m", "", func(group) bool { return true }, false},
		{"service", "30m", "", func(group) bool { return true }, false},
		{"host", "1h", "", func(group) bool { return true }, false},
		{"service", "2h", "", func(group) bool { return true }, false},
		{"host", "10m", `{service="svc-1"}`, func(g group) bool { return g.service == "svc-1" }, false},
		{"service", "10m", `{host!="h-03"}`, func(g group) bool { return g.host != "h-03" }, false},
		{"host", "30m", `{host=~"h-01|h-02|h-05|h-07"}`, func(g group) bool { return in(g.host, "h-01", "h-02", "h-05", "h-07") }, false},
		{"service", "10m", `{host!~"h-01|h-02", service!="svc-2"}`, func(g group) bool { return !in(g.host, "h-01", "h-02") && g.service != "svc-2" }, false},
		{"host", "10m", "", func(group) bool { return true }, true},
		{"service", "20m", `{host!="h-03"}`, func(g group) bool { return g.host != "h-03" }, true},
		{"host", "30m", "", func(group) bool { return true }, true},
		{"host", "1h", `{host=~"h-01|h-02|h-05|h-07"}`, func(g group) bool { return in(g.host, "h-01", "h-02", "h-05", "h-07") }, true},
	}
	at := from.Add(6*time.Hour + 10*time.Minute)
	rollingBase := serveAt(t, cl, names, at)
	span := func(c chart) (time.Time, time.Time) {
		if c.rolling {
			return from.Add(30 * time.Minute), to
		}
		return from, to
	}
	query := func(c chart) url.Values {
		f, e := span(c)
		q := url.Values{"from": {f.Format(time.RFC3339)}, "to": {e.Format(time.RFC3339)}, "group_by": {c.groupBy}, "top": {"3"}, "step": {c.step}}
		if c.query != "" {
			q.Set("query", c.query)
		}
		return q
	}
	ask := func(t *testing.T, c chart) api.SeriesResponse {
		t.Helper()
		var resp api.SeriesResponse
		if c.rolling {
			get(t, rollingBase, "/api/v1/series", query(c), &resp)
		} else {
			get(t, base, "/api/v1/series", query(c), &resp)
		}
		return resp
	}
	// exact checks resp against the minutes: the groups ranked by their
	// sums over the range, each step's sum over the step.
	exact := func(t *testing.T, c chart, resp api.SeriesResponse) {
		t.Helper()
		step, _ := time.ParseDuration(c.step)
		f, _ := span(c)
		f = f.Truncate(step)
		sums := map[string]map[int64]int64{}
		for _, g := range groups {
			key := g.service
			if c.groupBy == "host" {
				key = g.host
			}
			if key == "" || !c.match(g) {
				continue
			}
			if sums[key] == nil {
				sums[key] = map[int64]int64{}
			}
			for ms, v := range minutes[g] {
				if ms >= f.UnixMilli() {
					sums[key][ms-ms%step.Milliseconds()] += v
				}
			}
		}
		keys := make([]string, 0, len(sums))
		total := map[string]int64{}
		for k, s := range sums {
			keys = append(keys, k)
			for _, v := range s {
				total[k] += v
			}
		}
		slices.SortFunc(keys, func(x, y string) int { return cmp.Or(cmp.Compare(total[y], total[x]), cmp.Compare(x, y)) })
		top := keys[:min(3, len(keys))]
		if resp.TotalSeries != len(keys) || len(resp.Series) != len(top)+min(1, len(keys)-len(top)) {
			t.Fatalf("%d groups, %d lines; want %d groups, top %v", resp.TotalSeries, len(resp.Series), len(keys), top)
		}
		for i, s := range resp.Series {
			want := map[int64]int64{}
			if i < len(top) {
				if s.Labels[c.groupBy] != top[i] {
					t.Fatalf("line %d is %v, want %s", i, s.Labels, top[i])
				}
				want = sums[top[i]]
			} else {
				for _, k := range keys[len(top):] {
					for ms, v := range sums[k] {
						want[ms] += v
					}
				}
			}
			if len(s.Points) != len(want) {
				t.Fatalf("%v: %d points, want %d", s.Labels, len(s.Points), len(want))
			}
			for _, p := range s.Points {
				exp := float64(want[int64(p[0])]) / float64(step)
				if math.Abs(p[1]-exp) > 1e-12*exp {
					t.Fatalf("%v at %s: %v cores, want %v", s.Labels, time.UnixMilli(int64(p[0])).UTC().Format("15:04"), p[1], exp)
				}
			}
		}
	}
	before := make([]api.SeriesResponse, len(charts))
	for i, c := range charts {
		before[i] = ask(t, c)
		if before[i].Source != "rollups" {
			t.Fatalf("%s %s %s: source %s before the groups documents, want rollups", c.groupBy, c.step, c.query, before[i].Source)
		}
		exact(t, c, before[i])
	}

	// The compactor's documents, built from the service documents as they
	// are now (minutes) with their fingerprint.
	makeDoc := func(t *testing.T, h time.Time) querytest.Doc {
		var b indices.ServiceGroupsBuilder
		for _, g := range groups {
			for _, d := range windows(g) {
				if r := d.Body.(indices.RollupDoc); r.Timestamp.Truncate(time.Hour).Equal(h) {
					b.Add(r.Service, r.Host, r.Resolution, r.Timestamp, 1, r.Value)
				}
			}
		}
		return querytest.Rollup(names, b.Doc("cpu", h, groupsSources(t, cl, names, "cpu", h)))
	}
	groupDocs := map[time.Time]querytest.Doc{}
	var all []querytest.Doc
	for h := from; h.Before(to); h = h.Add(time.Hour) {
		groupDocs[h] = makeDoc(t, h)
		all = append(all, groupDocs[h])
	}
	querytest.Index(t, cl, names, all)
	// answers checks every chart's source and points; with some hours read
	// from the service documents, the rolling charts (whose first and last
	// parts are) too.
	answers := func(t *testing.T, someHours bool) {
		t.Helper()
		for _, c := range charts {
			resp := ask(t, c)
			want := "service_groups"
			switch {
			case (someHours || c.rolling) && c.step == "2h":
				want = "rollups" // a step of two hours would mix both ways
			case someHours || c.rolling:
				want += "+rollups"
			}
			if resp.Source != want {
				t.Fatalf("%s %s %s: source %s, want %s", c.groupBy, c.step, c.query, resp.Source, want)
			}
			exact(t, c, resp)
		}
	}
	t.Run("the groups documents answer what the service documents do", func(t *testing.T) {
		for i, c := range charts {
			resp := ask(t, c)
			want := "service_groups"
			if c.rolling {
				want += "+rollups"
			}
			if resp.Source != want {
				t.Fatalf("%s %s %s: source %s, want %s", c.groupBy, c.step, c.query, resp.Source, want)
			}
			resp.Source = before[i].Source
			if !reflect.DeepEqual(resp, before[i]) {
				t.Fatalf("%s %s %s: %+v, want %+v", c.groupBy, c.step, c.query, resp, before[i])
			}
		}
	})

	// One document's values moved between two windows of a group (its
	// sums and sources unchanged): the chart shows them, so the document is
	// what answers.
	h8 := from.Add(3 * time.Hour)
	t.Run("the documents are read", func(t *testing.T) {
		gs, err := indices.DecodeServiceGroups(groupDocs[h8].Body.(indices.RollupDoc).Groups)
		if err != nil {
			t.Fatal(err)
		}
		for i := range gs {
			if gs[i].Host == "h-11" {
				gs[i].Ten[2] += 6e11
				gs[i].Ten[3] -= 6e11
			}
		}
		changed := groupDocs[h8].Body.(indices.RollupDoc)
		changed.Groups = indices.EncodeServiceGroups(gs)
		querytest.Index(t, cl, names, []querytest.Doc{querytest.Rollup(names, changed)})
		resp := ask(t, charts[0])
		at := h8.Add(20 * time.Minute).UnixMilli()
		want := 0.0
		for ms, v := range minutes[groups[11]] {
			if ms-ms%(10*time.Minute).Milliseconds() == at {
				want += float64(v)
			}
		}
		want = (want + 6e11) / float64(10*time.Minute)
		if resp.Source != "service_groups" || resp.Series[0].Labels["host"] != "h-11" {
			t.Fatalf("source %s, first line %v: want service_groups, h-11", resp.Source, resp.Series[0].Labels)
		}
		found := false
		for _, p := range resp.Series[0].Points {
			if int64(p[0]) == at {
				found = true
				if math.Abs(p[1]-want) > 1e-12*want {
					t.Fatalf("h-11 at 07:20: %v cores, want the document's %v", p[1], want)
				}
			}
		}
		if !found {
			t.Fatal("h-11: no point at 07:20")
		}
		querytest.Index(t, cl, names, []querytest.Doc{groupDocs[h8]})
		answers(t, false)
	})

	// A late profile adds to a minute of h-04 at 05:33: its minute,
	// 10-minute and hourly documents are rewritten, the hour's groups
	// document is stale and the hour is read from the service documents.
	late, h5 := groups[4], from.Add(time.Hour)
	t.Run("an hour rewritten since", func(t *testing.T) {
		minutes[late][from.Add(93*time.Minute).UnixMilli()] += 5e11
		var rewritten []querytest.Doc
		for _, d := range windows(late) {
			if d.Body.(indices.RollupDoc).Timestamp.Truncate(time.Hour).Equal(h5) {
				rewritten = append(rewritten, d)
			}
		}
		querytest.Index(t, cl, names, rewritten)
		answers(t, true)
		groupDocs[h5] = makeDoc(t, h5)
		querytest.Index(t, cl, names, []querytest.Doc{groupDocs[h5]})
		answers(t, false)
	})
	t.Run("a 10-minute document rewritten alone", func(t *testing.T) {
		for _, d := range windows(late) {
			b := d.Body.(indices.RollupDoc)
			if b.Resolution != indices.ResolutionTenMinutes || !b.Timestamp.Equal(h5.Add(30*time.Minute)) {
				continue
			}
			b.Value += 7e11
			querytest.Index(t, cl, names, []querytest.Doc{querytest.Rollup(names, b)})
			// The hour is read from the service documents, its 10-minute
			// sums no longer equal its hourly ones: charts of steps under
			// an hour whose selection holds h-04 read every minute, as
			// before; those of whole hours read the hourly documents,
			// unchanged.
			for _, c := range charts {
				resp := ask(t, c)
				want := "service_groups+rollups"
				if c.step == "2h" || (c.step != "1h" && c.match(late)) {
					want = "rollups"
				}
				if resp.Source != want {
					t.Fatalf("%s %s %s: source %s, want %s", c.groupBy, c.step, c.query, resp.Source, want)
				}
				exact(t, c, resp)
			}
			querytest.Index(t, cl, names, []querytest.Doc{d})
			answers(t, true)
			groupDocs[h5] = makeDoc(t, h5)
			querytest.Index(t, cl, names, []querytest.Doc{groupDocs[h5]})
			answers(t, false)
			return
		}
		t.Fatal("no 10-minute document at 05:30")
	})
	t.Run("a document missing", func(t *testing.T) {
		d := groupDocs[h8]
		if status, body, err := opensearch.Raw(t.Context(), cl, http.MethodDelete, "/"+d.Index+"/_doc/"+d.ID+"?refresh=true", nil); err != nil || status != http.StatusOK {
			t.Fatalf("delete: %d %s %v", status, body, err)
		}
		answers(t, true)
		querytest.Index(t, cl, names, []querytest.Doc{groupDocs[h8]})
		answers(t, false)
	})
	t.Run("a host added to an hour after its document", func(t *testing.T) {
		added := group{"svc-1", "h-99"}
		groups = append(groups, added)
		minutes[added] = map[int64]int64{}
		for m := h8; m.Before(h8.Add(time.Hour)); m = m.Add(time.Minute) {
			minutes[added][m.UnixMilli()] = 2e10 // the heaviest host of the range
		}
		querytest.Index(t, cl, names, windows(added))
		answers(t, true)
	})
}

// groupsSources is the fingerprint of the service documents of typ's hour
// (indices.ServiceGroupsCheckAggs), as the compactor records it.
func groupsSources(t testing.TB, cl *opensearchapi.Client, names indices.Names, typ string, hour time.Time) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"size": 0, "aggs": indices.ServiceGroupsCheckAggs(),
		"query": map[string]any{"bool": map[string]any{"filter": []any{
			map[string]any{"term": map[string]any{"type": typ}},
			map[string]any{"range": map[string]any{"@timestamp": map[string]any{"gte": hour.UnixMilli(), "lt": hour.Add(time.Hour).UnixMilli(), "format": "epoch_millis"}}},
		}}}})
	status, resp, err := opensearch.Raw(context.Background(), cl, http.MethodPost, "/"+names.Rollups(hour)+"/_search", body)
	var out struct {
		Aggregations indices.ServiceGroupsCheck `json:"aggregations"`
	}
	if err != nil || status != http.StatusOK || json.Unmarshal(resp, &out) != nil {
		t.Fatalf("fingerprint of %s: %d %v %.300s", hour, status, err, resp)
	}
	return out.Aggregations.Sources()
}

package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// TestLabelForms reads labels from documents of both forms on the real node:
// older documents with every label as labels.<name> (yesterday's index and
// today's) and newer ones with contract labels as labels.<name> and the
// rest in label_pairs / label_names. Values are powers of ten, so each
// selection's total says exactly which documents it took.
func TestLabelForms(t *testing.T) {
	cl, names := querytest.Setup(t)
	ctx := context.Background()
	stack, id := querytest.Stack(names, now.Add(-20*time.Hour), "main.main", "main.work")
	doc := func(ago time.Duration, host string, v int64, labels map[string]string) indices.SampleDoc {
		return indices.SampleDoc{Timestamp: now.Add(-ago), Type: "cpu", Host: host, Service: "svc", StackIDs: []string{id}, Value: v, Count: 1, Labels: labels}
	}
	old := querytest.Samples(names,
		doc(13*time.Hour, "old-1", 1, map[string]string{"comm": "app", "team": "red", "zone": "eu"}), // yesterday's index
		doc(40*time.Minute, "old-2", 10, map[string]string{"comm": "app", "team": "blue"}),
	)
	paired := querytest.PairForm(querytest.Samples(names,
		doc(30*time.Minute, "new-1", 100, map[string]string{"comm": "app", "team": "red", "team_b": "red"}),
		doc(30*time.Minute, "new-2", 1000, map[string]string{"comm": "db", "team": "g=1"}),
		doc(30*time.Minute, "new-3", 10000, map[string]string{"comm": "x", "zone": "us"}),
	))
	fields := []string{"labels.comm", "labels.team", "labels.zone", "labels.team_b", "label_pairs", "label_names"}
	for _, day := range []time.Time{now, now.Add(-13 * time.Hour)} {
		if err := querytest.MapKeywords(ctx, cl, names.Samples(day), fields...); err != nil {
			t.Fatal(err)
		}
	}
	querytest.Index(t, cl, names, append(append([]querytest.Doc{stack}, old...), paired...))
	base := serve(t, cl, names, api.Options{})
	from := now.Add(-14 * time.Hour).Format(time.RFC3339)

	t.Run("selectors", func(t *testing.T) {
		tests := []struct {
			query string
			want  int64
		}{
			{`{team="red"}`, 1 + 100},
			{`{team!="red"}`, 10 + 1000 + 10000},
			{`{team=""}`, 10000},
			{`{team!=""}`, 1 + 10 + 100 + 1000},
			{`{team=~"re.*"}`, 1 + 100},
			{`{team=~"(?i)RED"}`, 1 + 100},
			{`{team=~"red|"}`, 1 + 100 + 10000},
			{`{team!~"re.*"}`, 10 + 1000 + 10000},
			{`{team!~"red|"}`, 10 + 1000},
			{`{team="g=1"}`, 1000},
			{`{team=~"g=.*|blue"}`, 10 + 1000},
			{`{team_b="red"}`, 100},
			{`{team_b=~"red"}`, 100},
			{`{zone="eu"}`, 1},
			{`{zone=~"us|eu"}`, 1 + 10000},
			{`{comm="app"}`, 1 + 10 + 100},
			{`{comm=~"app|db",team!="red"}`, 10 + 1000},
		}
		for _, tc := range tests {
			t.Run(tc.query, func(t *testing.T) {
				var fg api.FlamegraphResponse
				get(t, base, "/api/v1/flamegraph", url.Values{"query": {tc.query}, "from": {from}}, &fg)
				if fg.Total != tc.want {
					t.Fatalf("total %d, want %d", fg.Total, tc.want)
				}
			})
		}
	})
	t.Run("labels", func(t *testing.T) {
		var got api.LabelsResponse
		get(t, base, "/api/v1/labels", nil, &got)
		want := []string{"comm", "host", "service", "team", "team_b", "zone"}
		if !reflect.DeepEqual(got.Labels, want) {
			t.Fatalf("labels %q, want %q", got.Labels, want)
		}
	})
	t.Run("labels with a range limit under a day", func(t *testing.T) {
		var got api.LabelsResponse
		if code := get(t, serve(t, cl, names, api.Options{MaxRange: time.Hour}), "/api/v1/labels", nil, &got); code != http.StatusOK {
			t.Fatalf("HTTP %d", code)
		}
		// The last hour holds the new documents and one old one.
		want := []string{"comm", "host", "service", "team", "team_b", "zone"}
		if !reflect.DeepEqual(got.Labels, want) {
			t.Fatalf("labels %q, want %q", got.Labels, want)
		}
	})
	t.Run("values", func(t *testing.T) {
		for name, want := range map[string][]string{
			"team":   {"blue", "g=1", "red"},
			"zone":   {"eu", "us"},
			"comm":   {"app", "db", "x"},
			"team_b": {"red"},
		} {
			var got api.LabelValuesResponse
			get(t, base, "/api/v1/labels/"+name+"/values", url.Values{"from": {from}}, &got)
			if !reflect.DeepEqual(got.Values, want) {
				t.Errorf("values of %s: %q, want %q", name, got.Values, want)
			}
		}
		var got api.LabelValuesResponse
		get(t, base, "/api/v1/labels/team/values", url.Values{"from": {from}, "query": {`{comm="app"}`}}, &got)
		if want := []string{"blue", "red"}; !reflect.DeepEqual(got.Values, want) {
			t.Errorf(`values of team under {comm="app"}: %q, want %q`, got.Values, want)
		}
	})
	t.Run("search", func(t *testing.T) {
		const total = 11111.0
		for q, want := range map[string][]api.SearchResult{
			"RE": {{Kind: "label", Label: "team", Name: "red", Share: 101 / total}, {Kind: "label", Label: "team_b", Name: "red", Share: 100 / total}},
			"g=": {{Kind: "label", Label: "team", Name: "g=1", Share: 1000 / total}},
			"u":  {{Kind: "label", Label: "zone", Name: "us", Share: 10000 / total}, {Kind: "label", Label: "team", Name: "blue", Share: 10 / total}, {Kind: "label", Label: "zone", Name: "eu", Share: 1 / total}},
		} {
			var got api.SearchResponse
			get(t, base, "/api/v1/search", url.Values{"q": {q}, "from": {from}}, &got)
			var labels []api.SearchResult
			for _, r := range got.Results {
				if r.Kind == "label" {
					labels = append(labels, r)
				}
			}
			if fmt.Sprint(labels) != fmt.Sprint(want) {
				t.Errorf("search %q: labels %v, want %v", q, labels, want)
			}
		}
	})
	t.Run("bad names and regexps", func(t *testing.T) {
		// The last two pass the parser but not OpenSearch's determinization.
		for _, query := range []string{`{k8s.pod="x"}`, `{a-b="x"}`, `{comm=~"(?i)k{300}"}`, `{comm=~"(a|b)*a(a|b){19}"}`, `{team=~"(a|b)*a(a|b){19}"}`} {
			var e errorBody
			if code := get(t, base, "/api/v1/flamegraph", url.Values{"query": {query}}, &e); code != http.StatusBadRequest || e.Parameter != "query" {
				t.Errorf("%s: HTTP %d %+v, want 400 naming query", query, code, e)
			}
		}
	})
}

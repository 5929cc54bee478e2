package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
)

// TestFillGapsStackRollups: stackctl reindex copies the stack rollups from
// before the topics' first record with every stack's value, from a month
// created with the rollups template of now (stacks left out of _source:
// a plain _reindex copies them without their stacks) and from a month
// created before it (stacks in _source too). Every stack of every copied
// document is read back from the new generation's doc values, and the
// per-stack sums the query computes (indices.StackRollupSumsScript) are
// the written ones.
func TestFillGapsStackRollups(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	osc, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{testenv.OpenSearchURL(t)}, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	names := indices.Names{Prefix: testenv.Name(t, "stackcopy-") + "-"}
	t.Cleanup(func() { opensearch.RemovePrefix(context.Background(), osc, names.Prefix) })
	since := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	month, oldMonth := names.Rollups(since), names.Rollups(since.AddDate(0, -1, 0))
	// The old month's index was created before the templates left the
	// stacks out of _source: made here from today's template without its
	// _source, before the templates are applied (applying them keeps an
	// index's _source as it was created).
	createWithoutSourceExcludes(ctx, t, osc, names, names.Physical(1, oldMonth))
	if _, err := opensearch.ApplyTemplates(ctx, osc, names.Prefix, indices.Settings{Replicas: 0}); err != nil {
		t.Fatal(err)
	}

	rng := rand.New(rand.NewPCG(15, 3))
	want := map[string]map[string]indices.RollupDoc{} // index of generation 1 -> _id -> document
	var items []bulk.Item
	add := func(index string, d indices.RollupDoc) {
		id := indices.RollupID(&d)
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, bulk.Item{Index: index, ID: id, Doc: b})
		if want[index] == nil {
			want[index] = map[string]indices.RollupDoc{}
		}
		want[index][id] = d
	}
	for _, m := range []time.Time{since.Add(-2 * time.Hour), since.AddDate(0, -1, 0)} {
		gen1 := names.Physical(1, names.Rollups(m))
		for minute := range 6 {
			for _, host := range []string{"h1", "h2"} {
				d := indices.RollupDoc{Timestamp: m.Add(time.Duration(minute) * time.Minute), Resolution: indices.ResolutionMinute, Kind: indices.KindStacks, Type: "cpu", Service: "s", Host: host}
				n := 50 + rng.IntN(400)
				ids, values := make([]string, n), make([]int64, n)
				for i := range n {
					ids[i] = fmt.Sprintf("%s-%d-%04d", host, minute, i)
					values[i] = 10_000_000 * (1 + rng.Int64N(300))
					d.Value += values[i]
				}
				if err := d.SetStacks(ids, values); err != nil {
					t.Fatal(err)
				}
				add(gen1, d)
			}
		}
		// A stack document of before rollups schema 3 (one stack), and a
		// service document, which the _reindex copies.
		add(gen1, indices.RollupDoc{Timestamp: m.Truncate(time.Hour), Resolution: indices.ResolutionHour, Kind: indices.KindStack, Type: "cpu", Service: "s", Host: "h1", StackIDs: []string{"one"}, Value: 42})
		add(gen1, indices.RollupDoc{Timestamp: m, Resolution: indices.ResolutionMinute, Kind: "service", Type: "cpu", Service: "s", Host: "h1", Value: 7})
		// The new generation holds the month from since on.
		add(names.Physical(2, names.Rollups(m)), indices.RollupDoc{Timestamp: since.Add(time.Hour), Resolution: indices.ResolutionMinute, Kind: "service", Type: "cpu", Service: "s", Host: "h1", Value: 1})
	}
	if rejected, err := bulk.New(osc, bulk.Options{}).Write(ctx, items); err != nil || len(rejected) > 0 {
		t.Fatalf("write: %v %v", rejected, err)
	}
	if err := refresh(ctx, osc, []string{names.Prefix + "*"}); err != nil {
		t.Fatal(err)
	}
	// The premise: today's month holds no stacks in _source, the old one
	// does.
	for index, stored := range map[string]bool{names.Physical(1, month): false, names.Physical(1, oldMonth): true} {
		for id, d := range want[index] {
			if d.Kind != indices.KindStacks {
				continue
			}
			var got struct {
				Found  bool              `json:"found"`
				Source indices.RollupDoc `json:"_source"`
			}
			if err := getJSON(ctx, osc, "/"+index+"/_doc/"+id, &got); err != nil || !got.Found {
				t.Fatalf("get %s/%s: found %v, %v", index, id, got.Found, err)
			}
			if has := len(got.Source.StackIDs) > 0 && len(got.Source.StackValues) > 0; has != stored {
				t.Fatalf("%s: stacks in _source %v, want %v", index, has, stored)
			}
			break
		}
	}
	l, _ := opensearch.ReadLayout(ctx, osc, names)
	if err := opensearch.PlanSwap(l, names, 1).Apply(ctx, osc); err != nil {
		t.Fatal(err)
	}
	l, _ = opensearch.ReadLayout(ctx, osc, names)
	var out bytes.Buffer
	g, err := fillGaps(ctx, osc, names, l, 2, since, 0, &out)
	t.Logf("\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}

	for _, m := range []string{month, oldMonth} {
		t.Run(m, func(t *testing.T) {
			copies := names.Physical(2, m)
			got := searchRollups(ctx, t, osc, copies)
			sums := map[string]int64{}
			for id, w := range want[names.Physical(1, m)] {
				g, ok := got[id]
				if !ok {
					t.Fatalf("%s %s %s not copied", w.Kind, w.Host, w.Timestamp)
				}
				if w.Kind == "service" {
					continue
				}
				wantIDs, wantValues, err := w.Stacks()
				if err != nil {
					t.Fatal(err)
				}
				ids, values, err := g.Stacks()
				if err != nil || !reflect.DeepEqual(ids, wantIDs) || !reflect.DeepEqual(values, wantValues) {
					t.Fatalf("%s %s %s copied with %d stacks (%v), want %d", w.Kind, w.Host, w.Timestamp, len(ids), err, len(wantIDs))
				}
				for i, s := range wantIDs {
					sums[s] += wantValues[i]
				}
			}
			if q := stackRollupSums(ctx, t, osc, copies); !reflect.DeepEqual(q, sums) {
				t.Fatalf("the query's sums per stack over the copies: %d stacks, want %d", len(q), len(sums))
			}
		})
	}
	if copied := int64(len(want[names.Physical(1, month)]) + len(want[names.Physical(1, oldMonth)])); g.RollupsCopy != copied {
		t.Fatalf("%d rollups copied, want %d", g.RollupsCopy, copied)
	}
}

// createWithoutSourceExcludes creates index with today's rollups template
// less its _source: an index created before rollups schema 4.
func createWithoutSourceExcludes(ctx context.Context, t *testing.T, osc *opensearchapi.Client, names indices.Names, index string) {
	t.Helper()
	tpls, err := names.Templates(indices.Settings{Replicas: 0})
	if err != nil {
		t.Fatal(err)
	}
	for _, tpl := range tpls {
		if tpl.Name != names.Prefix+"rollups" {
			continue
		}
		var body struct {
			Template struct {
				Settings map[string]any `json:"settings"`
				Mappings map[string]any `json:"mappings"`
			} `json:"template"`
		}
		if err := json.Unmarshal(tpl.Body, &body); err != nil {
			t.Fatal(err)
		}
		if _, ok := body.Template.Mappings["_source"]; !ok {
			t.Fatal("the rollups template keeps the stacks in _source")
		}
		delete(body.Template.Mappings, "_source")
		b, err := json.Marshal(body.Template)
		if err != nil {
			t.Fatal(err)
		}
		if status, resp, err := opensearch.Raw(ctx, osc, http.MethodPut, "/"+index, b); err != nil || status != http.StatusOK {
			t.Fatalf("create %s: %d %s %v", index, status, resp, err)
		}
		return
	}
	t.Fatal("no rollups template")
}

// searchRollups reads every rollup document of index by _id, its stacks
// from doc values.
func searchRollups(ctx context.Context, t *testing.T, osc *opensearchapi.Client, index string) map[string]indices.RollupDoc {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"size": 1000, "docvalue_fields": indices.StackFields})
	status, resp, err := opensearch.Raw(ctx, osc, http.MethodPost, "/"+index+"/_search", body)
	if err != nil || status != http.StatusOK {
		t.Fatalf("search %s: %d %.300s %v", index, status, resp, err)
	}
	var r struct {
		Hits struct {
			Hits []stackRollupHit `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(resp, &r); err != nil {
		t.Fatal(err)
	}
	out := map[string]indices.RollupDoc{}
	for _, h := range r.Hits.Hits {
		src, err := indices.WithStackDocValues(h.Source, h.Fields)
		if err != nil {
			t.Fatal(err)
		}
		var d indices.RollupDoc
		if err := json.Unmarshal(src, &d); err != nil {
			t.Fatal(err)
		}
		out[h.ID] = d
	}
	return out
}

// stackRollupSums sums index's stack rollups per stack as the query does.
func stackRollupSums(ctx context.Context, t *testing.T, osc *opensearchapi.Client, index string) map[string]int64 {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"size": 0, "query": stackKinds,
		"aggs": map[string]any{"sums": map[string]any{"scripted_metric": indices.StackRollupSumsScript(nil)}}})
	status, resp, err := opensearch.Raw(ctx, osc, http.MethodPost, "/"+index+"/_search", body)
	if err != nil || status != http.StatusOK {
		t.Fatalf("sum %s: %d %.300s %v", index, status, resp, err)
	}
	var r struct {
		Aggregations struct {
			Sums struct {
				Value map[string]int64 `json:"value"`
			} `json:"sums"`
		} `json:"aggregations"`
	}
	if err := json.Unmarshal(resp, &r); err != nil {
		t.Fatal(err)
	}
	return r.Aggregations.Sums.Value
}

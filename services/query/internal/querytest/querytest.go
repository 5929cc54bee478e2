// Package querytest sets up OpenSearch indices with known documents for the
// query API's tests, the UI's browser tests and the benchmark: templates
// under a unique prefix, bulk indexing of stack, sample and rollup documents.
package querytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// Setup connects to the test OpenSearch (skipping, or failing under CI=true,
// when it is missing), applies the templates under a prefix unique to t and
// deletes that prefix's indices and templates when t ends.
func Setup(t testing.TB) (*opensearchapi.Client, indices.Names) {
	t.Helper()
	url := testenv.OpenSearchURL(t)
	ctx := context.Background()
	cl, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{url}, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("opensearch client: %v", err)
	}
	names := indices.Names{Prefix: testenv.Name(t, "t-") + "-"}
	if _, err := opensearch.ApplyTemplates(ctx, cl, names.Prefix, indices.Settings{Replicas: 0, RefreshInterval: "-1"}); err != nil {
		t.Fatalf("apply templates: %v", err)
	}
	t.Cleanup(func() { Cleanup(context.Background(), cl, names) })
	return cl, names
}

// Cleanup deletes the indices and templates of names.
func Cleanup(ctx context.Context, cl *opensearchapi.Client, names indices.Names) error {
	return opensearch.RemovePrefix(ctx, cl, names.Prefix)
}

// Doc is one document to index.
type Doc struct {
	Index string
	ID    string
	Body  any
}

// Stack returns the stack document of frames given root first (the way
// people read them) and its ID; StackDoc stores them leaf first.
func Stack(names indices.Names, t time.Time, rootFirst ...string) (Doc, string) {
	frames := make([]indices.Frame, len(rootFirst))
	funcs := make([]string, 0, len(rootFirst))
	seen := map[string]bool{}
	for i, f := range rootFirst {
		frames[len(rootFirst)-1-i] = indices.Frame{Function: f, Binary: "app"}
		if !seen[f] {
			seen[f] = true
			funcs = append(funcs, f)
		}
	}
	id := indices.StackID(frames)
	return Doc{Index: names.Stacks(), ID: id, Body: indices.StackDoc{
		Timestamp: t, Frames: frames, Functions: funcs, Leaf: frames[0].Function, Depth: len(frames),
	}}, id
}

// Sample returns a samples document, already packed (see Samples), in its
// daily index.
func Sample(names indices.Names, d indices.SampleDoc) Doc {
	return Doc{Index: names.Samples(d.Timestamp), ID: indices.SampleID(d.Host, d.Type, d.Timestamp, d.Labels), Body: d}
}

// Samples packs docs the way the indexer writes them, one document per
// (profile, label set), so fixtures can still be written one stack at a
// time: each doc names at most one stack (StackIDs: []string{id}, Value its
// value; none for samples without a stack). Docs with equal Timestamp, Type,
// Host, Service and Labels become one document whose stacks are theirs
// (values of a stack given twice add up), whose Value and Count are their
// sums. Documents keep the order of their first doc. It panics on a doc
// with several stacks or a negative value: fixtures are code.
func Samples(names indices.Names, docs ...indices.SampleDoc) []Doc {
	type group struct {
		doc    indices.SampleDoc
		values map[string]int64
		order  []string
	}
	var groups []*group
	byKey := map[string]*group{}
	for _, d := range docs {
		if len(d.StackIDs) > 1 || len(d.StackValues) > 0 {
			panic(fmt.Sprintf("querytest.Samples: give one stack per doc, got %q", d.StackIDs))
		}
		key := sampleKey(d)
		g := byKey[key]
		if g == nil {
			g = &group{doc: d, values: map[string]int64{}}
			g.doc.StackIDs, g.doc.Value, g.doc.Count = nil, 0, 0
			byKey[key] = g
			groups = append(groups, g)
		}
		g.doc.Value += d.Value
		g.doc.Count += d.Count
		if len(d.StackIDs) == 1 {
			id := d.StackIDs[0]
			if _, ok := g.values[id]; !ok {
				g.order = append(g.order, id)
			}
			g.values[id] += d.Value
		}
	}
	out := make([]Doc, 0, len(groups))
	for _, g := range groups {
		values := make([]int64, len(g.order))
		for i, id := range g.order {
			values[i] = g.values[id]
		}
		if err := g.doc.SetStacks(g.order, values); err != nil {
			panic(fmt.Sprintf("querytest.Samples: %v", err))
		}
		out = append(out, Sample(names, g.doc))
	}
	return out
}

// sampleKey identifies the document a sample belongs to: its profile
// (time, type, host) and label set; service is derived from them but is
// part of the key so that a fixture mixing them up stays visible.
func sampleKey(d indices.SampleDoc) string {
	keys := make([]string, 0, len(d.Labels))
	for k := range d.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := []string{strconv.FormatInt(d.Timestamp.UnixNano(), 10), d.Type, d.Host, d.Service}
	for _, k := range keys {
		parts = append(parts, k, d.Labels[k])
	}
	return strings.Join(parts, "\x00")
}

// Rollup returns a rollup document in its monthly index.
func Rollup(names indices.Names, d indices.RollupDoc) Doc {
	return Doc{Index: names.Rollups(d.Timestamp), ID: indices.RollupID(&d), Body: d}
}

// Bulk indexes docs in batches and fails on any per-item error. It does not
// refresh: call Refresh once after the last batch.
func Bulk(ctx context.Context, cl *opensearchapi.Client, docs []Doc) error {
	const batch = 5000
	for start := 0; start < len(docs); start += batch {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for _, d := range docs[start:min(start+batch, len(docs))] {
			enc.Encode(map[string]any{"index": map[string]any{"_index": d.Index, "_id": d.ID}})
			if err := enc.Encode(d.Body); err != nil {
				return fmt.Errorf("encode document: %w", err)
			}
		}
		status, body, err := rawNDJSON(ctx, cl, buf.Bytes())
		if err != nil {
			return fmt.Errorf("bulk: %w", err)
		}
		if status != http.StatusOK {
			return fmt.Errorf("bulk: HTTP %d: %.500s", status, body)
		}
		var resp struct {
			Errors bool `json:"errors"`
			Items  []map[string]struct {
				Status int             `json:"status"`
				Error  json.RawMessage `json:"error"`
			} `json:"items"`
		}
		if err := json.Unmarshal(body, &resp); err != nil {
			return fmt.Errorf("decode bulk answer: %w", err)
		}
		if resp.Errors {
			for _, it := range resp.Items {
				for _, r := range it {
					if r.Status/100 != 2 {
						return fmt.Errorf("bulk item: HTTP %d: %s", r.Status, r.Error)
					}
				}
			}
		}
	}
	return nil
}

func rawNDJSON(ctx context.Context, cl *opensearchapi.Client, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "/_bulk", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := cl.Client.Perform(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	_, err = out.ReadFrom(resp.Body)
	return resp.StatusCode, out.Bytes(), err
}

// Refresh makes everything indexed under names searchable.
func Refresh(ctx context.Context, cl *opensearchapi.Client, names indices.Names) error {
	status, body, err := opensearch.Raw(ctx, cl, http.MethodPost, "/"+names.Prefix+"*/_refresh?allow_no_indices=true", nil)
	if err != nil {
		return fmt.Errorf("refresh: %w", err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("refresh: HTTP %d: %.300s", status, body)
	}
	return nil
}

// Index bulk-indexes docs and refreshes, failing t on error.
func Index(t testing.TB, cl *opensearchapi.Client, names indices.Names, docs []Doc) {
	t.Helper()
	ctx := context.Background()
	if err := Bulk(ctx, cl, docs); err != nil {
		t.Fatal(err)
	}
	if err := Refresh(ctx, cl, names); err != nil {
		t.Fatal(err)
	}
}

// PairForm rewrites samples documents (from Sample or Samples) into the
// form the indexer writes since label_pairs: labels of
// record.ContractLabels stay labels.<name>, every other label becomes a
// "name=value" in label_pairs and its name in label_names. Documents
// written before keep every label as labels.<name> (Sample's form).
func PairForm(docs []Doc) []Doc {
	out := make([]Doc, len(docs))
	for i, d := range docs {
		s, ok := d.Body.(indices.SampleDoc)
		if !ok {
			panic(fmt.Sprintf("querytest.PairForm: %T is not a samples document", d.Body))
		}
		raw, err := json.Marshal(s)
		if err != nil {
			panic(fmt.Sprintf("querytest.PairForm: %v", err))
		}
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			panic(fmt.Sprintf("querytest.PairForm: %v", err))
		}
		contract := map[string]string{}
		var pairs, names []string
		for k, v := range s.Labels {
			if record.IsContractLabel(k) {
				contract[k] = v
				continue
			}
			pairs = append(pairs, k+"="+v)
			names = append(names, k)
		}
		slices.Sort(pairs)
		slices.Sort(names)
		delete(body, "labels")
		if len(contract) > 0 {
			body["labels"] = contract
		}
		if len(pairs) > 0 {
			body["label_pairs"], body["label_names"] = pairs, names
		}
		out[i] = Doc{Index: d.Index, ID: d.ID, Body: body}
	}
	return out
}

// MapKeywords creates index (from its template) if it does not exist and
// maps each of fields ("label_pairs", "labels.team") as a keyword unless it
// is mapped already, so that documents of both label forms can be indexed
// into it whichever form the samples template of this tree maps; the
// services add new template fields to existing indices the same way.
func MapKeywords(ctx context.Context, cl *opensearchapi.Client, index string, fields ...string) error {
	status, body, err := opensearch.Raw(ctx, cl, http.MethodPut, "/"+index, nil)
	if err != nil {
		return fmt.Errorf("create index %s: %w", index, err)
	}
	if status != http.StatusOK && !bytes.Contains(body, []byte("resource_already_exists_exception")) {
		return fmt.Errorf("create index %s: HTTP %d: %.300s", index, status, body)
	}
	status, body, err = opensearch.Raw(ctx, cl, http.MethodGet, "/"+index+"/_mapping/field/"+strings.Join(fields, ","), nil)
	if err != nil || status != http.StatusOK {
		return fmt.Errorf("read mapping of %s: HTTP %d %.300s: %v", index, status, body, err)
	}
	var mapped map[string]struct {
		Mappings map[string]json.RawMessage `json:"mappings"`
	}
	if err := json.Unmarshal(body, &mapped); err != nil {
		return fmt.Errorf("decode mapping of %s: %w", index, err)
	}
	props := map[string]any{}
	for _, f := range fields {
		if _, ok := mapped[index].Mappings[f]; ok {
			continue
		}
		parent, name, nested := strings.Cut(f, ".")
		if !nested {
			props[f] = map[string]any{"type": "keyword"}
			continue
		}
		obj, _ := props[parent].(map[string]any)
		if obj == nil {
			obj = map[string]any{"properties": map[string]any{}}
			props[parent] = obj
		}
		obj["properties"].(map[string]any)[name] = map[string]any{"type": "keyword"}
	}
	if len(props) == 0 {
		return nil
	}
	raw, _ := json.Marshal(map[string]any{"properties": props})
	status, body, err = opensearch.Raw(ctx, cl, http.MethodPut, "/"+index+"/_mapping", raw)
	if err != nil || status != http.StatusOK {
		return fmt.Errorf("map %v in %s: HTTP %d %.300s: %v", fields, index, status, body, err)
	}
	return nil
}

// StackRollups returns the KindStacks documents, as the rollup writes them,
// of stacks: KindStack documents of one stack each, packed one document
// per (resolution, window, type, service, host), values summed per stack.
// It panics on a document of another kind or stack count: a fixture's bug.
func StackRollups(names indices.Names, stacks []indices.RollupDoc) []Doc {
	type window struct {
		res, typ, service, host string
		at                      int64
	}
	sums := map[window]map[string]int64{}
	var order []window
	for _, d := range stacks {
		if d.Kind != indices.KindStack || len(d.StackIDs) != 1 {
			panic(fmt.Sprintf("not a stack document of one stack: %+v", d))
		}
		w := window{d.Resolution, d.Type, d.Service, d.Host, d.Timestamp.UnixNano()}
		if sums[w] == nil {
			sums[w] = map[string]int64{}
			order = append(order, w)
		}
		sums[w][d.StackIDs[0]] += d.Value
	}
	out := make([]Doc, 0, len(order))
	for _, w := range order {
		d := indices.RollupDoc{Timestamp: time.Unix(0, w.at).UTC(), Resolution: w.res, Kind: indices.KindStacks, Type: w.typ, Service: w.service, Host: w.host}
		var ids []string
		var values []int64
		for id, v := range sums[w] {
			ids = append(ids, id)
			values = append(values, v)
			d.Value += v
		}
		if err := d.SetStacks(ids, values); err != nil {
			panic(err)
		}
		out = append(out, Rollup(names, d))
	}
	return out
}

package indexer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/indexer/internal/indexer"
	"github.com/stackstream/stackstream/services/indexer/internal/indexertest"
)

// cpuRecord is a CPU profile record of host at with one sample per labels
// entry, each of value 100 on stack.
func cpuRecord(t *testing.T, host string, at time.Time, labels []map[string]string, stack ...string) indexertest.Record {
	t.Helper()
	b := pproftest.NewCPU(at, time.Second)
	for _, l := range labels {
		b.Sample(l, []int64{1, 100}, stack...)
	}
	v, err := record.EncodeProfile(b.Profile())
	if err != nil {
		t.Fatal(err)
	}
	return indexertest.Record{Host: host, Meta: record.Meta{Type: record.ProfileCPU, Host: host}, Time: at, Val: v}
}

// dlqReasons maps the DLQ records' original offsets to their reasons.
func dlqReasons(t *testing.T, e *indexertest.Env, want int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range e.ReadDLQ(t, want, 30*time.Second) {
		out[record.HeaderValue(d.Headers, record.HeaderDLQOffset)] = record.HeaderValue(d.Headers, record.HeaderDLQReason)
	}
	if len(out) != want {
		t.Fatalf("DLQ holds %d records (%v), want %d", len(out), out, want)
	}
	return out
}

// samplesIndices lists the samples indices of e.
func samplesIndices(t *testing.T, e *indexertest.Env) []string {
	t.Helper()
	st, body, err := opensearch.Raw(context.Background(), e.OS, http.MethodGet, "/_cat/indices/"+e.Names.SamplesPattern()+"?h=index&format=json", nil)
	if err != nil || st != http.StatusOK {
		t.Fatalf("list indices: %d %s %v", st, body, err)
	}
	var rows []struct{ Index string }
	if err := json.Unmarshal(body, &rows); err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Index
	}
	return out
}

// TestTimeOutOfRange: profiles stamped 1970, 2262, older than the retention
// or beyond the clock skew go to the DLQ as time_out_of_range, and no index
// is created for their days; profiles inside the window are indexed.
func TestTimeOutOfRange(t *testing.T) {
	e := setup(t, 1)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const retention = 7 * 24 * time.Hour
	l := []map[string]string{{"comm": "a"}}
	// The profiles' own times; the records are stamped now, as Kafka wants.
	in := []indexertest.Record{
		cpuRecord(t, "h", time.Unix(1, 0), l, "f"),                                 // 0: 1970
		cpuRecord(t, "h", time.Unix(0, math.MaxInt64), l, "f"),                     // 1: 2262
		cpuRecord(t, "h", now.Add(-retention-time.Minute), l, "f"),                 // 2: past the retention
		cpuRecord(t, "h", now.Add(record.DefaultMaxClockSkew+time.Minute), l, "f"), // 3: beyond the skew
		cpuRecord(t, "h", now.Add(-retention+time.Hour), l, "f"),                   // 4: inside
		cpuRecord(t, "h", now.Add(record.DefaultMaxClockSkew-time.Minute), l, "f"), // 5: inside
	}
	times := make([]time.Time, len(in))
	for i := range in {
		times[i], in[i].Time = in[i].Time, time.Now()
	}
	e.Produce(t, in)
	r := start(t, e, e.URL, func(o *indexer.Options) {
		o.MaxAge = retention
		// A clock that runs (batches are due by it), from now.
		started := time.Now()
		o.Now = func() time.Time { return now.Add(time.Since(started)) }
	})
	e.WaitCaughtUp(t, time.Minute)
	r.stop(t)

	reasons := dlqReasons(t, e, 4)
	for _, off := range []string{"0", "1", "2", "3"} {
		if !strings.HasPrefix(reasons[off], indexer.ReasonTime+": ") {
			t.Errorf("record %s: DLQ reason %q, want %s", off, reasons[off], indexer.ReasonTime)
		}
	}
	if n := testutil.ToFloat64(r.metrics.DLQ.WithLabelValues(indexer.ReasonTime)); n != 4 {
		t.Errorf("dlq_total{reason=time_out_of_range} = %v, want 4", n)
	}
	got := samplesIndices(t, e)
	want := map[string]bool{e.Names.Samples(times[4]): true, e.Names.Samples(times[5]): true}
	if len(got) != len(want) {
		t.Fatalf("samples indices %v, want only %v", got, want)
	}
	for _, ix := range got {
		if !want[ix] {
			t.Fatalf("index %s exists, dated outside the window; want only %v", ix, want)
		}
	}
}

// TestSplitPartsKeepEveryDocument: two records of one interval split into
// parts (same host, time and label set) keep a document each, so their
// totals add up instead of the second overwriting the first.
func TestSplitPartsKeepEveryDocument(t *testing.T) {
	e := setup(t, 1)
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	l := []map[string]string{{"pid": "7", "comm": "api"}}
	var krs []*kgo.Record
	for _, part := range []string{"0", "1"} {
		kr := cpuRecord(t, "h", at, l, "work", "main").KafkaRecord(e.Topics.ProfilesSymbolized)
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: record.HeaderPart, Value: []byte(part)})
		krs = append(krs, kr)
	}
	if err := e.Kafka.ProduceSync(context.Background(), krs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	start(t, e, e.URL)
	e.WaitCaughtUp(t, time.Minute)
	stored := e.ReadStored(t)
	id := indices.StackID([]indices.Frame{{Function: "work"}, {Function: "main"}})
	if stored.Docs != 2 || stored.Value[id] != 200 || stored.Raw != 2 {
		t.Fatalf("stored %d documents, stack value %d, raw %d; want 2 documents, 200 and 2 (both parts)", stored.Docs, stored.Value[id], stored.Raw)
	}
}

// mappingFields counts the fields of index's mapping.
func mappingFields(t *testing.T, e *indexertest.Env, index string) int {
	t.Helper()
	st, body, err := opensearch.Raw(context.Background(), e.OS, http.MethodGet, "/"+index+"/_mapping", nil)
	if err != nil || st != http.StatusOK {
		t.Fatalf("get mapping: %d %s %v", st, body, err)
	}
	var count func(m map[string]any) int
	count = func(m map[string]any) int {
		n := 0
		for _, v := range m {
			f, _ := v.(map[string]any)
			n++
			if p, ok := f["properties"].(map[string]any); ok {
				n += count(p)
			}
		}
		return n
	}
	var resp map[string]struct {
		Mappings struct {
			Properties map[string]any `json:"properties"`
		} `json:"mappings"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	return count(resp[index].Mappings.Properties)
}

// TestLabelKeyBurst: 2,000 distinct odd label keys (dots, dashes, digits,
// "a" next to "a.b") in one day are indexed without a mapping error, the
// mapping keeps its fields, and a good record afterwards is indexed.
func TestLabelKeyBurst(t *testing.T) {
	e := setup(t, 1)
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	if at.Truncate(24*time.Hour).Add(24*time.Hour).Sub(at) <= time.Hour {
		// Every record, the last half an hour after the first, in one
		// daily index: within an hour of midnight the last one was in
		// the next day's.
		at = at.Add(-time.Hour)
	}
	index := e.Names.Samples(at)
	e.Produce(t, []indexertest.Record{cpuRecord(t, "h", at, []map[string]string{{"comm": "first"}}, "f")})
	r := start(t, e, e.URL)
	e.WaitCaughtUp(t, time.Minute)
	fields := mappingFields(t, e, index)

	var burst []indexertest.Record
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 100 {
		var sets []map[string]string
		for j := range 4 {
			l := map[string]string{"comm": "odd"}
			for k := range 5 {
				n := (i*4+j)*5 + k // 2,000 keys
				key := [...]string{"k%d", "k%d.sub", "k-%d", "%d", "a.b.%d"}[k]
				l[fmt.Sprintf(key, n)] = fmt.Sprint(rng.IntN(1000))
			}
			l["a"], l["a.b"] = "1", "2"
			sets = append(sets, l)
		}
		burst = append(burst, cpuRecord(t, "h", at.Add(time.Duration(i+1)*time.Second), sets, "f"))
	}
	e.Produce(t, burst)
	good := cpuRecord(t, "h", at.Add(time.Hour/2), []map[string]string{{"comm": "good", "zone": "eu-1"}}, "g")
	e.Produce(t, []indexertest.Record{good})
	e.WaitCaughtUp(t, time.Minute)
	r.stop(t)

	if n := testutil.ToFloat64(r.metrics.Records.WithLabelValues("dlq")); n != 0 {
		t.Fatalf("%v records dead-lettered, want none", n)
	}
	if got := mappingFields(t, e, index); got != fields {
		t.Fatalf("the mapping grew from %d to %d fields", fields, got)
	}
	if n := e.CountDocs(t, index); n != 1+400+1 {
		t.Fatalf("%d documents, want 402", n)
	}
	// Valid keys are searchable as pairs and names; the others were dropped.
	for _, q := range []struct {
		query string
		want  int64
	}{
		{`{"query":{"term":{"label_pairs":"zone=eu-1"}}}`, 1},
		{`{"query":{"term":{"labels.comm":"good"}}}`, 1},
		{`{"query":{"term":{"label_names":"a"}}}`, 400},
		{`{"query":{"prefix":{"label_names":"k"}}}`, 400},
	} {
		st, body, err := opensearch.Raw(context.Background(), e.OS, http.MethodPost, "/"+index+"/_count", []byte(q.query))
		var resp struct{ Count int64 }
		if err != nil || st != http.StatusOK || json.Unmarshal(body, &resp) != nil || resp.Count != q.want {
			t.Fatalf("%s: %d %s %v, want count %d", q.query, st, body, err, q.want)
		}
	}
	if n := testutil.ToFloat64(r.metrics.LabelsDropped.WithLabelValues("invalid_key")); n != 400*(4+1) {
		t.Fatalf("labels_dropped_total{reason=invalid_key} = %v, want 2,000 (4 of 5 keys and a.b per document)", n)
	}
}

// TestTemplateUpgradesOldIndex: an index created with the samples mapping
// of schema 2 (labels.* dynamic) takes the new mapping when templates are
// applied, and documents of both forms are in it afterwards.
func TestTemplateUpgradesOldIndex(t *testing.T) {
	e := setup(t, 1)
	ctx := context.Background()
	prefix := e.Names.Prefix + "old-"
	names := indices.Names{Prefix: prefix}
	t.Cleanup(func() { opensearch.RemovePrefix(context.Background(), e.OS, prefix) })
	at := time.Now().UTC()
	index := names.Samples(at)
	old := `{"settings":{"index":{"number_of_shards":1,"number_of_replicas":0,"sort.field":["service","host","@timestamp"],"sort.order":["asc","asc","asc"]}},
	"mappings":{"dynamic":"strict","_source":{"enabled":false},
	"dynamic_templates":[{"labels_as_keywords":{"path_match":"labels.*","mapping":{"type":"keyword","ignore_above":512}}}],
	"properties":{"@timestamp":{"type":"date"},"type":{"type":"keyword"},"host":{"type":"keyword"},"service":{"type":"keyword"},
	"stack_id":{"type":"keyword"},"stack_values":{"type":"binary","doc_values":true},"value":{"type":"long"},"count":{"type":"long","index":false},
	"labels":{"type":"object","dynamic":true}}}}`
	if st, body, err := opensearch.Raw(ctx, e.OS, http.MethodPut, "/"+index, []byte(old)); err != nil || st != http.StatusOK {
		t.Fatalf("create old index: %d %s %v", st, body, err)
	}
	oldDoc := `{"@timestamp":"` + at.Format(time.RFC3339) + `","type":"cpu","host":"h","service":"s","value":1,"labels":{"pid":"1","zone":"a"}}`
	if st, body, err := opensearch.Raw(ctx, e.OS, http.MethodPut, "/"+index+"/_doc/old?refresh=true", []byte(oldDoc)); err != nil || st >= 300 {
		t.Fatalf("index old document: %d %s %v", st, body, err)
	}
	if _, err := opensearch.ApplyTemplates(ctx, e.OS, prefix, indices.Settings{Replicas: 0}); err != nil {
		t.Fatalf("apply templates over the old index: %v", err)
	}
	var d indices.SampleDoc
	d = indices.SampleDoc{Timestamp: at, Type: "cpu", Host: "h", Service: "s", Value: 2}
	d.SetLabels(map[string]string{"pid": "2", "zone": "b", "a": "1"})
	newDoc, _ := json.Marshal(d)
	if st, body, err := opensearch.Raw(ctx, e.OS, http.MethodPut, "/"+index+"/_doc/new?refresh=true", newDoc); err != nil || st >= 300 {
		t.Fatalf("index new document: %d %s %v", st, body, err)
	}
	for q, want := range map[string]int64{
		`{"query":{"exists":{"field":"labels.pid"}}}`:      2,
		`{"query":{"term":{"label_pairs":"zone=b"}}}`:      1,
		`{"query":{"term":{"labels.zone":"a"}}}`:           1,
		`{"query":{"terms":{"label_names":["zone","a"]}}}`: 1,
	} {
		st, body, err := opensearch.Raw(ctx, e.OS, http.MethodPost, "/"+index+"/_count", []byte(q))
		var resp struct{ Count int64 }
		if err != nil || st != http.StatusOK || json.Unmarshal(body, &resp) != nil || resp.Count != want {
			t.Fatalf("%s: %d %s %v, want count %d", q, st, body, err, want)
		}
	}
}

// TestDocumentTooLargeForNode: OpenSearch (behind a proxy enforcing a
// 16 KiB http.max_content_length, which the node itself only takes at
// start-up) refuses requests with 413. The record whose labels make its
// document larger than that goes to the DLQ as too_large; the records
// around it are stored and committed, and nothing is retried forever.
func TestDocumentTooLargeForNode(t *testing.T) {
	e := setup(t, 1)
	target, err := url.Parse(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	const maxContent = 16 << 10
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > maxContent {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			io.WriteString(w, `{"error":{"type":"content_too_long_exception","reason":"request body too large"},"status":413}`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()

	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	big := map[string]string{"comm": "big"}
	for i := range 40 {
		big[fmt.Sprintf("label_%02d", i)] = strings.Repeat("v", 500)
	}
	var in []indexertest.Record
	for i, l := range []map[string]string{{"comm": "a"}, big, {"comm": "c"}} {
		in = append(in, cpuRecord(t, "h", at.Add(time.Duration(i)*time.Second), []map[string]string{l}, "f", fmt.Sprint("g", i)))
	}
	e.Produce(t, in)
	r := start(t, e, srv.URL)
	e.WaitCaughtUp(t, time.Minute)
	reasons := dlqReasons(t, e, 1)
	if !strings.HasPrefix(reasons["1"], indexer.ReasonTooLarge+": ") || !strings.Contains(reasons["1"], "HTTP 413") {
		t.Fatalf("DLQ reason %q, want too_large with HTTP 413", reasons["1"])
	}
	if n := e.CountDocs(t, e.Names.SamplesPattern()); n != 2 {
		t.Fatalf("%d sample documents, want the 2 other records'", n)
	}
	if n := testutil.ToFloat64(r.metrics.Bulk.Splits); n == 0 {
		t.Fatal("no request was split: the proxy's limit was not reached")
	}
}

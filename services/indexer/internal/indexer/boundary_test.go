package indexer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/indexer/internal/convert"
	"github.com/stackstream/stackstream/services/indexer/internal/indexertest"
)

// TestPanicIsDeadLettered: a record whose conversion panics goes to the DLQ
// with reason "panic" and is counted; the records around it are indexed and
// the loop goes on. No known record panics (each one found was fixed where
// it broke), so the conversion is made to panic on one record's key.
func TestPanicIsDeadLettered(t *testing.T) {
	e := indexertest.Setup(t, testenv.KafkaBrokers(t), testenv.OpenSearchURL(t), testenv.Name(t, "ix-"), 1)
	ctx := context.Background()
	kcl, err := kafka.NewClient(ctx, kafka.Config{Brokers: e.Brokers, DialTimeout: 10 * time.Second}, ConsumerOpts(e.Group, e.Topics.ProfilesSymbolized)...)
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	osc, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{e.URL}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	ix := New(kcl, bulk.New(osc, bulk.Options{Metrics: m.Bulk}), Options{Names: e.Names, DLQTopic: e.Topics.DLQ, FlushInterval: 100 * time.Millisecond, Metrics: m})
	ix.convertRecord = func(r *kgo.Record, known convert.Known) (convert.Documents, error) {
		if string(r.Key) == "boom" {
			var docs *convert.Documents
			_ = docs.Samples[0] // a nil dereference, as a bug would have it
		}
		return ix.convert(r, known)
	}
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	var recs []indexertest.Record
	for i, host := range []string{"a", "boom", "b"} {
		v, err := record.EncodeProfile(pproftest.NewCPU(at.Add(time.Duration(i)*time.Second), time.Second).Sample(map[string]string{"comm": "x"}, []int64{1, 10}, "f").Profile())
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, indexertest.Record{Host: host, Meta: record.Meta{Type: record.ProfileCPU, Host: host}, Time: at, Val: v})
	}
	e.Produce(t, recs)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ix.Run(rctx) }()
	e.WaitCaughtUp(t, time.Minute)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	dlq := e.ReadDLQ(t, 1, 30*time.Second)
	if len(dlq) != 1 || string(dlq[0].Key) != "boom" {
		t.Fatalf("DLQ holds %d records, want the one keyed boom", len(dlq))
	}
	if reason := record.HeaderValue(dlq[0].Headers, record.HeaderDLQReason); !strings.HasPrefix(reason, ReasonPanic+": ") || !strings.Contains(reason, "nil pointer") {
		t.Fatalf("DLQ reason %q, want panic with its value", reason)
	}
	if n := testutil.ToFloat64(m.DLQ.WithLabelValues(ReasonPanic)); n != 1 {
		t.Fatalf("dlq_total{reason=panic} = %v, want 1", n)
	}
	if n := e.CountDocs(t, e.Names.SamplesPattern()); n != 2 {
		t.Fatalf("%d sample documents, want those of the 2 other records", n)
	}
}

// TestStackDocumentsBounded: a record whose new stacks would make more than
// maxStackDocBytes of documents (4,096 frames of a 64 KiB name: 512 MiB of
// JSON from a few hundred KB of pprof) goes to the DLQ as too_large before
// any is encoded; the stacks of the record before it stay in the batch.
func TestStackDocumentsBounded(t *testing.T) {
	ix := New(nil, nil, Options{})
	b := newBatch()
	at := time.Now()
	ok := convert.Documents{Stacks: []convert.Stack{{ID: "ok", Frames: []indices.Frame{{Function: "main"}}, At: at}}}
	name := strings.Repeat("f", record.DefaultLimits().MaxStringBytes)
	deep := make([]indices.Frame, record.DefaultLimits().MaxLocationsPerSample)
	for i := range deep {
		deep[i] = indices.Frame{Function: name, Line: int64(i)}
	}
	huge := convert.Documents{Stacks: []convert.Stack{{ID: "small", Frames: []indices.Frame{{Function: "g"}}, At: at}, {ID: "deep", Frames: deep, At: at}}}
	ix.add(b, &kgo.Record{Offset: 1}, converted{docs: ok})
	ix.add(b, &kgo.Record{Offset: 2}, converted{docs: huge})
	if len(b.items) != 1 || b.items[0].ID != "ok" || len(b.stacks) != 1 || len(b.owner) != 1 {
		t.Fatalf("batch holds %d items (%v), want only the first record's stack", len(b.items), b.stacks)
	}
	if len(b.dlq) != 1 || !strings.HasPrefix(record.HeaderValue(b.dlq[0].Headers, record.HeaderDLQReason), ReasonTooLarge+": ") {
		t.Fatalf("DLQ %d records, want the deep record's as too_large", len(b.dlq))
	}
}

// TestHostTooLongRecord: a record whose host (header, or key when the
// header is empty) is longer than record.MaxHostBytes goes to the DLQ even
// when its profile has no sample to make a document of.
func TestHostTooLongRecord(t *testing.T) {
	ix := New(nil, nil, Options{})
	empty, err := record.EncodeProfile(pproftest.NewCPU(time.Now(), time.Second).Profile())
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("h", record.MaxHostBytes+1)
	for _, r := range []*kgo.Record{
		{Headers: record.Meta{Type: record.ProfileCPU, Host: long}.Headers(), Value: empty},
		{Key: []byte(long), Headers: record.Meta{Type: record.ProfileCPU}.Headers(), Value: empty},
	} {
		if _, err := ix.convert(r, nil); reasonOf(err) != ReasonHostTooLong {
			t.Fatalf("convert = %v, want %s", err, ReasonHostTooLong)
		}
	}
	r := &kgo.Record{Headers: record.Meta{Type: record.ProfileCPU, Host: "h"}.Headers(), Value: empty}
	if _, err := ix.convert(r, nil); err != nil {
		t.Fatalf("convert of a short host = %v", err)
	}
}

// TestConvertAllStopsAtChunkDocBytes: a chunk stops converting once its
// documents take chunkDocBytes, so the documents held between conversion
// and the batch stay bounded however many records a chunk has; the rest
// are converted next.
func TestConvertAllStopsAtChunkDocBytes(t *testing.T) {
	at := time.Date(2026, 11, 30, 23, 59, 58, 0, time.UTC)
	ix := New(nil, nil, Options{Workers: 1, Now: func() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) }})
	procs := indexertest.ManyProcesses(t, at, 5000)
	r := &kgo.Record{Headers: procs.Meta.Headers(), Value: procs.Val, Timestamp: time.Now()}
	one, err := ix.convert(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, s := range one.Samples {
		size += len(s.Doc)
	}
	recs := make([]*kgo.Record, 2*chunkDocBytes/size)
	for i := range recs {
		recs[i] = r
	}
	got := ix.convertAll(newBatch(), recs)
	if want := (chunkDocBytes + size - 1) / size; len(got) != want {
		t.Fatalf("converted %d records of %d bytes of documents each, want %d (up to %d bytes)", len(got), size, want, chunkDocBytes)
	}
	for i, c := range got {
		if c.err != nil || len(c.docs.Samples) != len(one.Samples) {
			t.Fatalf("record %d: %d documents, %v", i, len(c.docs.Samples), c.err)
		}
	}
}

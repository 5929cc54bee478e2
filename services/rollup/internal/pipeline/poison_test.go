package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/rollup/internal/aggregate"
)

// undefinedLocation is the record that used to crash the consumer: a sample
// naming location 7, which the profile does not define, decoded to a nil
// *profile.Location.
func undefinedLocation(t testing.TB, at time.Time) []byte {
	t.Helper()
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample:     []*profile.Sample{{Location: []*profile.Location{{ID: 7}}, Value: []int64{1, 10}}},
		TimeNanos:  at.UnixNano(),
	}
	v, err := record.EncodeProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func junk(n int) []byte {
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// TestRecordIsAFaultBoundary calls process directly: the undefined-location
// record goes to the DLQ as an invalid profile (no panic: the cause is fixed
// in record.DecodeProfile), and a panic that does happen becomes a DLQ
// record with reason panic, counted, and the next record is processed.
func TestRecordIsAFaultBoundary(t *testing.T) {
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	window := aggregate.Config{AllowedLateness: time.Minute, Retention: time.Minute, Now: func() time.Time { return t0 }}
	r := New(Config{Topics: record.TopicsFor("t."), Window: window}, nil, log, prometheus.NewRegistry())
	part := aggregate.NewPartition(window, aggregate.Checkpoint{})
	meta := record.Meta{Type: record.ProfileCPU, Host: "web-1"}.Headers()
	rec := func(offset int64, v []byte) *kgo.Record {
		return &kgo.Record{Topic: "t.profiles.symbolized", Offset: offset, Value: v, Headers: meta}
	}

	d := r.process(context.Background(), part, rec(0, undefinedLocation(t, t0)))
	if d == nil || !strings.Contains(record.HeaderValue(d.Headers, record.HeaderDLQReason), "sample has nil location") {
		t.Fatalf("undefined location: DLQ record %v", d)
	}
	if got := testutil.ToFloat64(r.m.DLQ.WithLabelValues("invalid_profile")); got != 1 {
		t.Fatalf("invalid_profile count %v", got)
	}

	decode := r.decode
	r.decode = func([]byte) (aggregate.Input, error) { panic("boom") }
	d = r.process(context.Background(), part, rec(1, nil))
	r.decode = decode
	if d == nil || record.HeaderValue(d.Headers, record.HeaderDLQReason) != "process record: panic: boom" || record.HeaderValue(d.Headers, record.HeaderDLQOffset) != "1" {
		t.Fatalf("panic: DLQ record %v", d)
	}
	if testutil.ToFloat64(r.m.panics) != 1 || testutil.ToFloat64(r.m.DLQ.WithLabelValues("panic")) != 1 || part.Next() != 2 {
		t.Fatalf("panics %v, next %d", testutil.ToFloat64(r.m.panics), part.Next())
	}
	good, err := record.EncodeProfile(pproftest.NewCPU(t0, 10*time.Second).Sample(map[string]string{record.LabelService: "a"}, []int64{1, 5}, "main").Profile())
	if err != nil {
		t.Fatal(err)
	}
	if d := r.process(context.Background(), part, rec(2, good)); d != nil || part.Next() != 3 {
		t.Fatalf("good record after a panic: %v", d)
	}
}

// TestPoisonRecords runs one consumer against the real broker and node:
// the undefined-location record, a 1.5 MB junk value, a record with a 1 MB
// key and 1 MB of headers, profiles stamped in 1970 and 2262, then a good
// profile. The good one's rollups are written while the consumer runs, the
// DLQ holds the bad ones with their reasons (the big ones cut to fit a
// default producer), and the loop never stopped.
func TestPoisonRecords(t *testing.T) {
	e := newEnv(t, 1)
	now := t0.Add(10 * time.Minute)
	e.window.Now = func() time.Time { return now }
	e.window.MaxAge, e.window.MaxClockSkew = 7*24*time.Hour, 10*time.Minute
	e.idle = time.Second

	// The broker takes records up to 16 MiB; a default producer stops at 1 MB.
	big, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ProducerBatchMaxBytes(16<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	meta := record.Meta{Type: record.ProfileCPU, Host: "web-1"}.Headers()
	rec := func(key, v []byte, headers []kgo.RecordHeader) *kgo.Record {
		return &kgo.Record{Topic: e.topics.ProfilesSymbolized, Key: key, Value: v, Headers: append(headers, meta...)}
	}
	encode := func(at int64) []byte {
		p := pproftest.NewCPU(t0, 10*time.Second).Sample(map[string]string{record.LabelService: "old"}, []int64{1, 5}, "main").Profile()
		p.TimeNanos = at
		v, err := record.EncodeProfile(p)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	many := make([]kgo.RecordHeader, 2000)
	for i := range many {
		many[i] = kgo.RecordHeader{Key: "h", Value: bytes.Repeat([]byte("v"), 500)}
	}
	bad := []*kgo.Record{
		rec([]byte("web-1"), undefinedLocation(t, t0), nil),
		rec([]byte("web-1"), junk(1_500_000), nil),
		rec(junk(1<<20), junk(1000), many),
		rec([]byte("web-1"), encode(1), nil),             // 1970
		rec([]byte("web-1"), encode(math.MaxInt64), nil), // 2262
	}
	if err := big.ProduceSync(context.Background(), bad...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	x := expected{}
	e.produce(record.ProfileCPU, "web-1", x.cpuProfile("web-1", t0, 40, 2))
	want := x.finish()

	in := e.start(e.osURL)
	// want holds each host's trees; the one partition adds a service tree
	// per service of the hour (2), a partition tree and its function table,
	// and the minute's and 10 minutes' partition heads (tests write every
	// head).
	waitFor(t, "the good profile's rollups", 90*time.Second, func() bool { return e.count() == len(want)+6 })
	select {
	case err := <-in.done:
		t.Fatalf("the consumer stopped: %v", err)
	default:
	}
	compare(t, byKey(e.docs()), want)
	for reason, n := range map[string]float64{"invalid_profile": 1, "decode": 2, "time_out_of_range": 2, "panic": 0} {
		if got := testutil.ToFloat64(in.r.m.DLQ.WithLabelValues(reason)); got != n {
			t.Errorf("dlq_total{reason=%q} = %v, want %v", reason, got, n)
		}
	}
	if got := testutil.ToFloat64(in.r.m.panics); got != 0 {
		t.Errorf("%v panics", got)
	}
	in.close(t)
	// Past every bad record; the good one's windows stay in memory (kept
	// for late profiles), so the commit stops at it.
	if c := e.committed()[0]; c.At != int64(len(bad)) {
		t.Errorf("committed %d, want %d", c.At, len(bad))
	}

	wantReason := []string{"sample has nil location", "value is not gzip", "value is not gzip", "1970-01-01T00:00:00Z is more than 168h0m0s before now", "2262-04-11T23:47:16Z is more than 10m0s after now"}
	for i, d := range e.dlq(len(bad)) {
		reason := record.HeaderValue(d.Headers, record.HeaderDLQReason)
		if !strings.Contains(reason, wantReason[i]) {
			t.Errorf("dlq record %d: reason %.300q, want it to say %q", i, reason, wantReason[i])
		}
		if off := record.HeaderValue(d.Headers, record.HeaderDLQOffset); off != string(rune('0'+i)) {
			t.Errorf("dlq record %d: offset header %q", i, off)
		}
		if n := record.DLQRecordBytes(d); n > record.DLQMaxRecordBytes {
			t.Errorf("dlq record %d is %d bytes", i, n)
		}
		cut := record.HeaderValue(d.Headers, record.HeaderDLQTruncated)
		switch i {
		case 1:
			if !strings.HasPrefix(cut, "value_len=1500000 value_kept=") || !bytes.HasPrefix(bad[1].Value, d.Value) {
				t.Errorf("junk record: %s=%q, %d value bytes", record.HeaderDLQTruncated, cut, len(d.Value))
			}
		case 2:
			if !strings.HasPrefix(cut, "value_len=1000 key_len=1048576 key_kept=4096 headers=2005 headers_kept=") || len(d.Key) != 4096 {
				t.Errorf("hostile key and headers: %s=%q, key %d bytes", record.HeaderDLQTruncated, cut, len(d.Key))
			}
		default:
			if cut != "" {
				t.Errorf("dlq record %d cut: %q", i, cut)
			}
		}
	}
}

// TestDLQRecordsFitDefaultProducer produces DLQ copies of oversized records
// with franz-go's default limits, plain and in a transaction (as the
// symbolizer does): before DLQRecord cut them, the 1.5 MB one failed with
// MESSAGE_TOO_LARGE and aborted the transaction.
func TestDLQRecordsFitDefaultProducer(t *testing.T) {
	e := newEnv(t, 1)
	many := make([]kgo.RecordHeader, 10000)
	for i := range many {
		many[i] = kgo.RecordHeader{Key: "header", Value: bytes.Repeat([]byte("v"), 200)}
	}
	origs := []*kgo.Record{
		{Key: []byte("web-1"), Value: junk(1_500_000)},
		{Key: junk(1 << 20), Value: junk(1 << 20), Headers: many},
	}
	var dlq []*kgo.Record
	for i, o := range origs {
		o.Topic, o.Offset = e.topics.ProfilesRaw, int64(i)
		dlq = append(dlq, record.DLQRecord(e.topics.DLQ, "test", o, errSized(strings.Repeat("r", 10000))))
	}
	plain, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.ProduceSync(context.Background(), dlq...).FirstErr(); err != nil {
		t.Fatalf("default producer: %v", err)
	}
	txn, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.TransactionalID(e.group+"-txn"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(context.Background(), dlq...).FirstErr(); err != nil {
		t.Fatalf("transactional producer: %v", err)
	}
	if err := txn.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
		t.Fatalf("commit transaction: %v", err)
	}
	got := e.dlq(2 * len(dlq))
	for _, d := range got {
		if record.HeaderValue(d.Headers, record.HeaderDLQTruncated) == "" || len(record.HeaderValue(d.Headers, record.HeaderDLQReason)) != record.MaxDLQReasonBytes {
			t.Errorf("stored DLQ record: headers %d, truncated %q", len(d.Headers), record.HeaderValue(d.Headers, record.HeaderDLQTruncated))
		}
	}
}

type errSized string

func (e errSized) Error() string { return string(e) }

// count is the number of rollup documents stored, or -1 while the index is
// missing or its shards are starting (e.docs fails the test then).
func (e *env) count() int {
	ctx := context.Background()
	pattern := e.names.RollupsPattern()
	if status, _, err := opensearch.Raw(ctx, e.os, http.MethodPost, "/"+pattern+"/_refresh", nil); err != nil || status != http.StatusOK {
		return -1
	}
	status, body, err := opensearch.Raw(ctx, e.os, http.MethodGet, "/"+pattern+"/_count", nil)
	if err != nil || status != http.StatusOK {
		return -1
	}
	var resp struct {
		Count int `json:"count"`
	}
	if json.Unmarshal(body, &resp) != nil {
		return -1
	}
	return resp.Count
}

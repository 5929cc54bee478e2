package convert

import (
	"compress/gzip"
	"context"
	"encoding/gob"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
)

// loadgenCorpusFile holds what the symbolizer wrote for `stackctl loadgen`'s
// fleet: 10 hosts over 30 simulated seconds (seed 15, every other flag at
// its default), 30 CPU and 30 memory records of profiles.symbolized as the
// indexer reads them (stored gzip pprof, headers).
const loadgenCorpusFile = "testdata/loadgen-symbolized.gob.gz"

type loadgenRecord struct {
	Headers   map[string][]byte
	Value     []byte
	Timestamp time.Time
}

func readLoadgenCorpus(tb testing.TB) []loadgenRecord {
	tb.Helper()
	f, err := os.Open(loadgenCorpusFile)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var recs []loadgenRecord
	if err := gob.NewDecoder(zr).Decode(&recs); err != nil {
		tb.Fatalf("decode %s: %v", loadgenCorpusFile, err)
	}
	return recs
}

func (r loadgenRecord) meta(tb testing.TB) record.Meta {
	var h []kgo.RecordHeader
	for k, v := range r.Headers {
		h = append(h, kgo.RecordHeader{Key: k, Value: v})
	}
	m, err := record.ParseMeta(h)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// TestRecordLoadgenCorpus rewrites testdata/loadgen-symbolized.gob.gz from
// a profiles.symbolized topic, only when asked: loadgen as in the
// symbolizer's TestRecordLoadgenCorpus (services/symbolizer/internal/pipeline),
// then bin/stackstream-symbolizer on the same topic prefix until its 60
// records are out, then
//
//	cd services/indexer && UPDATE_FIXTURES=true STACKSTREAM_LOADGEN_TOPIC_PREFIX=symcorpus. \
//	  go test -run TestRecordLoadgenCorpus ./internal/convert
func TestRecordLoadgenCorpus(t *testing.T) {
	prefix := os.Getenv("STACKSTREAM_LOADGEN_TOPIC_PREFIX")
	if os.Getenv("UPDATE_FIXTURES") != "true" || prefix == "" {
		t.Skip("rewrites the fixture only with UPDATE_FIXTURES=true and STACKSTREAM_LOADGEN_TOPIC_PREFIX")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(testenv.KafkaBrokers(t)...), kgo.ConsumeTopics(record.TopicsFor(prefix).ProfilesSymbolized),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []loadgenRecord
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		f := cl.PollFetches(ctx)
		cancel()
		if f.NumRecords() == 0 {
			break
		}
		f.EachRecord(func(r *kgo.Record) {
			lr := loadgenRecord{Headers: map[string][]byte{}, Value: r.Value, Timestamp: r.Timestamp}
			for _, h := range r.Headers {
				lr.Headers[h.Key] = h.Value
			}
			recs = append(recs, lr)
		})
	}
	if len(recs) == 0 {
		t.Fatal("no records")
	}
	f, err := os.Create(loadgenCorpusFile)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	if err := gob.NewEncoder(zw).Encode(recs); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d records", len(recs))
}

// BenchmarkConvertLoadgen is the indexer's conversion of the symbolizer's
// output for stackctl loadgen's fleet: one op is one host interval (its
// CPU and memory record) through Converter.Record, the fast path with its
// caches warm (every record went through once before the timer). No
// Kafka or OpenSearch I/O.
//
//	go test -run '^$' -bench ConvertLoadgen -benchtime 300x -cpu 1 ./internal/convert
func BenchmarkConvertLoadgen(b *testing.B) {
	recs := readLoadgenCorpus(b)
	metas := make([]record.Meta, len(recs))
	intervals := 0
	for i, r := range recs {
		metas[i] = r.meta(b)
		if metas[i].Type == record.ProfileCPU {
			intervals++
		}
	}
	c := New(DefaultLimits())
	for i, r := range recs {
		if _, path, err := c.Record(testNames, metas[i], "", r.Value, r.Timestamp); err != nil || path != Fast {
			b.Fatalf("warm-up: %s path, %v", path, err)
		}
	}
	perInterval := len(recs) / intervals
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < perInterval; j++ {
			k := (i*perInterval + j) % len(recs)
			if _, _, err := c.Record(testNames, metas[k], "", recs[k].Value, recs[k].Timestamp); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	ms := float64((processCPU(b) - cpu0).Microseconds()) / 1000 / float64(b.N)
	b.ReportMetric(ms, "ms/host-interval")
	b.ReportMetric(10_000/ms, "hosts/core")
}

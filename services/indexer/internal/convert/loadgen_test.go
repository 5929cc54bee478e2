package convert

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/pproftest/symcorpus"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
)

// TestRecordLoadgenCorpus rewrites pkg/pproftest/symcorpus from
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
	var recs []symcorpus.Record
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		f := cl.PollFetches(ctx)
		cancel()
		if f.NumRecords() == 0 {
			break
		}
		f.EachRecord(func(r *kgo.Record) {
			lr := symcorpus.Record{Headers: map[string][]byte{}, Value: r.Value, Timestamp: r.Timestamp}
			for _, h := range r.Headers {
				lr.Headers[h.Key] = h.Value
			}
			recs = append(recs, lr)
		})
	}
	if len(recs) == 0 {
		t.Fatal("no records")
	}
	symcorpus.Write(t, recs)
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
	recs := symcorpus.Read(b)
	metas := make([]record.Meta, len(recs))
	intervals := 0
	for i, r := range recs {
		metas[i] = r.Meta(b)
		if metas[i].Type == record.ProfileCPU {
			intervals++
		}
	}
	c := New(DefaultLimits())
	for i, r := range recs {
		if _, path, err := c.Record(testNames, metas[i], "", r.Value, r.Timestamp, nil); err != nil || path != Fast {
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
			if _, _, err := c.Record(testNames, metas[k], "", recs[k].Value, recs[k].Timestamp, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	ms := float64((processCPU(b) - cpu0).Microseconds()) / 1000 / float64(b.N)
	b.ReportMetric(ms, "ms/host-interval")
	b.ReportMetric(10_000/ms, "hosts/core")
}

package pipeline

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/symbolizer/internal/ktest"
	"github.com/stackstream/stackstream/services/symbolizer/internal/testbin"
)

// TestPoisonRecordsDoNotStopTheLoop produces, on one partition of the real
// broker, a 1.5 MB junk value, the 100-byte profile naming a location it
// does not define, a profile like google/pprof's large.cpu whose output
// does not fit one record, and then a good profile. The junk and the broken
// profile go to the DLQ, the large profile comes out split with exact
// totals, the good one comes out symbolized, and the same runner is still
// running.
func TestPoisonRecordsDoNotStopTheLoop(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	corpus := testbin.BuildCorpus(t, t.TempDir())
	topics, _ := ktest.Topics(t, brokers, 1)
	ctx := context.Background()
	big, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(16<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	if err := big.ProduceSync(ctx, &kgo.Record{Topic: topics.Debuginfo, Key: []byte(corpus.Topic.BuildID), Value: corpus.TopicValue}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	meta := record.Meta{Type: record.ProfileCPU, Host: "host-a"}
	junk := make([]byte, 1_500_000)
	rand.Read(junk)
	now := time.Now()
	large, err := record.EncodeProfile(largeGoCPU(now))
	if err != nil {
		t.Fatal(err)
	}
	good, err := record.EncodeProfile(corpus.Profile(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	recs := []*kgo.Record{
		{Key: []byte("junk"), Value: junk},
		{Key: []byte("undefined-location"), Value: undefinedLocation(t)},
		{Key: []byte("large"), Value: large},
		{Key: []byte("good"), Value: good},
	}
	for _, r := range recs {
		r.Topic, r.Headers, r.Timestamp = topics.ProfilesRaw, meta.Headers(), now
	}
	if err := big.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	s := start(t, brokers, topics, testenv.Name(t, "grp-"))

	dlq := ktest.Consume(t, brokers, topics.DLQ, 2, 2*time.Minute, time.Second)
	reasons := map[string]string{}
	for _, r := range dlq {
		reasons[string(r.Key)] = record.HeaderValue(r.Headers, record.HeaderDLQReason)
	}
	if len(dlq) != 2 || !strings.Contains(reasons["junk"], "not gzip") ||
		!(strings.Contains(reasons["undefined-location"], "nil location") || strings.Contains(reasons["undefined-location"], "panic")) {
		t.Fatalf("dlq: %d records, reasons %q", len(dlq), reasons)
	}
	out := ktest.Consume(t, brokers, topics.ProfilesSymbolized, 3, 2*time.Minute, time.Second)
	var parts []*kgo.Record
	var goodOut *kgo.Record
	for _, r := range out {
		switch string(r.Key) {
		case "large":
			parts = append(parts, r)
		case "good":
			goodOut = r
		}
	}
	if goodOut == nil || len(parts) < 2 {
		t.Fatalf("symbolized: %d parts of the large profile, good profile written: %v", len(parts), goodOut != nil)
	}
	want, err := record.DecodeProfile(large)
	if err != nil {
		t.Fatal(err)
	}
	checkParts(t, &Processor{Topics: topics, MaxOutputBytes: 999000}, recs[2], want, Result{Out: parts, Parts: len(parts)}, "")
	p, err := record.DecodeProfile(goodOut.Value)
	if err != nil {
		t.Fatal(err)
	}
	if got := testbin.Names(p)[3]; len(got) != 2 || got[0] != "leaf_work" {
		t.Fatalf("good profile after the poison: %q", got)
	}
	select {
	case err := <-s.done:
		t.Fatalf("runner stopped: %v", err)
	default:
	}
	s.stop()
	if v := testutil.ToFloat64(s.metrics.Split); v != 1 {
		t.Errorf("split profiles counted %v, want 1", v)
	}
	t.Logf("dlq reasons %q; large profile (%d bytes gzip) in %d parts", reasons, len(large), len(parts))
}

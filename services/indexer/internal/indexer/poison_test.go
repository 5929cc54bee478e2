package indexer_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/services/indexer/internal/indexer"
	"github.com/stackstream/stackstream/services/indexer/internal/indexertest"
)

// TestPoisonRecords: a record whose sample names a location the profile does
// not define and 1.5 MB of junk go to the DLQ with their reasons; the
// indexer goes on and indexes the good record after them.
func TestPoisonRecords(t *testing.T) {
	e := setup(t, 1)
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	good := cpuRecord(t, "h", at, []map[string]string{{"comm": "a"}}, "f")
	var plain bytes.Buffer
	if err := pproftest.NewCPU(at, time.Second).Sample(nil, []int64{1, 1}, "f").Profile().WriteUncompressed(&plain); err != nil {
		t.Fatal(err)
	}
	undefined := good
	// A sample (field 2, 6 bytes) naming location 9, which the table lacks,
	// with its two values.
	undefined.Val = pproftest.Gzip(append(plain.Bytes(), 0x12, 0x06, 0x08, 0x09, 0x10, 0x01, 0x10, 0x01))
	junk := good
	junk.Val = bytes.Repeat([]byte{0x1f, 0x8b, 0x08, 0x00, 'j', 'u', 'n', 'k'}, 1536<<10/8)
	r := start(t, e, e.URL)
	// The broker takes records up to 16 MiB; the producer's default limit
	// is 1 MB.
	big, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...), kgo.ProducerBatchMaxBytes(16<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	for _, rec := range []indexertest.Record{undefined, junk, good} {
		if err := big.ProduceSync(context.Background(), rec.KafkaRecord(e.Topics.ProfilesSymbolized)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	e.WaitCaughtUp(t, time.Minute)
	reasons := dlqReasons(t, e, 2)
	if !strings.HasPrefix(reasons["0"], indexer.ReasonInvalid+": ") {
		t.Errorf("undefined location: DLQ reason %q, want %s", reasons["0"], indexer.ReasonInvalid)
	}
	if !strings.HasPrefix(reasons["1"], indexer.ReasonNotGzip+": ") {
		t.Errorf("junk: DLQ reason %q, want %s", reasons["1"], indexer.ReasonNotGzip)
	}
	if n := e.CountDocs(t, e.Names.SamplesPattern()); n != 1 {
		t.Fatalf("%d sample documents, want the good record's one", n)
	}
	select {
	case err := <-r.done:
		t.Fatalf("the indexer stopped: %v", err)
	default:
	}
}

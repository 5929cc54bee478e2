package pipeline

import (
	"encoding/gob"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/symbolizer/internal/ktest"
)

// loadgenCorpusFile holds what `stackctl loadgen` published for 10 hosts
// over 30 simulated seconds (seed 15, every other flag at its default):
// 30 CPU and 30 memory records of profiles.raw and the debuginfo of the 12
// simulated binaries they name. The loadgen package is internal to
// services/ctl, so the benchmark replays its output instead of calling it.
const loadgenCorpusFile = "testdata/loadgen.gob"

// loadgenCorpus is the recorded fleet output.
type loadgenCorpus struct {
	Debuginfo map[string][]byte // build ID -> debuginfo topic value
	Raw       []corpusRecord    // profiles.raw, in produced order
}

type corpusRecord struct {
	Key     []byte
	Headers map[string][]byte
	Value   []byte
}

func (c corpusRecord) record(topic string) *kgo.Record {
	r := &kgo.Record{Topic: topic, Key: c.Key, Value: c.Value}
	for k, v := range c.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: v})
	}
	return r
}

func readLoadgenCorpus(tb testing.TB) *loadgenCorpus {
	tb.Helper()
	f, err := os.Open(loadgenCorpusFile)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var c loadgenCorpus
	if err := gob.NewDecoder(f).Decode(&c); err != nil {
		tb.Fatalf("decode %s: %v", loadgenCorpusFile, err)
	}
	return &c
}

// TestRecordLoadgenCorpus rewrites testdata/loadgen.gob from topics that
// stackctl loadgen filled, only when asked:
//
//	export STACKSTREAM_KAFKA_TOPIC_PREFIX=symcorpus.
//	bin/stackctl init && bin/stackctl loadgen -hosts 10 -duration 30s -speed 30 -seed 15
//	cd services/symbolizer && UPDATE_FIXTURES=true STACKSTREAM_LOADGEN_TOPIC_PREFIX=symcorpus. \
//	  go test -run TestRecordLoadgenCorpus ./internal/pipeline
func TestRecordLoadgenCorpus(t *testing.T) {
	prefix := os.Getenv("STACKSTREAM_LOADGEN_TOPIC_PREFIX")
	if os.Getenv("UPDATE_FIXTURES") != "true" || prefix == "" {
		t.Skip("rewrites the fixture only with UPDATE_FIXTURES=true and STACKSTREAM_LOADGEN_TOPIC_PREFIX")
	}
	brokers := testenv.KafkaBrokers(t)
	topics := record.TopicsFor(prefix)
	c := loadgenCorpus{Debuginfo: map[string][]byte{}}
	for _, r := range ktest.Consume(t, brokers, topics.Debuginfo, 1, 20*time.Second, 3*time.Second) {
		c.Debuginfo[string(r.Key)] = r.Value
	}
	for _, r := range ktest.Consume(t, brokers, topics.ProfilesRaw, 1, 20*time.Second, 3*time.Second) {
		cr := corpusRecord{Key: r.Key, Value: r.Value, Headers: map[string][]byte{}}
		for _, h := range r.Headers {
			cr.Headers[h.Key] = h.Value
		}
		c.Raw = append(c.Raw, cr)
	}
	if len(c.Debuginfo) == 0 || len(c.Raw) == 0 {
		t.Fatalf("topics %s* hold %d debuginfo and %d raw records", prefix, len(c.Debuginfo), len(c.Raw))
	}
	f, err := os.Create(loadgenCorpusFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := gob.NewEncoder(f).Encode(&c); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d debuginfo values, %d raw records", len(c.Debuginfo), len(c.Raw))
}

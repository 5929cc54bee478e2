// Package symcorpus is what the symbolizer wrote to profiles.symbolized for
// `stackctl loadgen`'s fleet: 10 hosts over 30 simulated seconds (seed 15,
// every other flag at its default), 30 CPU and 30 memory records as the
// indexer and the rollup read them (stored gzip pprof, headers). The
// indexer's TestRecordLoadgenCorpus (services/indexer/internal/convert)
// records it again.
package symcorpus

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/gob"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/schemas/record"
)

//go:embed loadgen-symbolized.gob.gz
var corpus []byte

const fileName = "loadgen-symbolized.gob.gz"

// Record is one record of the corpus.
type Record struct {
	Headers   map[string][]byte
	Value     []byte
	Timestamp time.Time
}

// Meta is the record's headers as a consumer reads them.
func (r Record) Meta(tb testing.TB) record.Meta {
	tb.Helper()
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

// Read returns the corpus's records.
func Read(tb testing.TB) []Record {
	tb.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(corpus))
	if err != nil {
		tb.Fatal(err)
	}
	var recs []Record
	if err := gob.NewDecoder(zr).Decode(&recs); err != nil {
		tb.Fatalf("decode %s: %v", fileName, err)
	}
	return recs
}

// Protobufs returns the corpus's values gunzipped: the pprof protobufs a
// wire reader gets after its gzip step.
func Protobufs(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, r := range Read(tb) {
		zr, err := gzip.NewReader(bytes.NewReader(r.Value))
		if err != nil {
			tb.Fatal(err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, raw)
	}
	return out
}

// Write replaces the corpus file in this package's directory with recs.
func Write(tb testing.TB, recs []Record) {
	tb.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		tb.Fatal("no source path for symcorpus")
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := gob.NewEncoder(zw).Encode(recs); err != nil {
		tb.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(self), fileName), buf.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
}

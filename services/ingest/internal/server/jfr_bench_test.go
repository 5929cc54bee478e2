package server_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stackstream/stackstream/services/ingest/internal/ingesttest"
	"github.com/stackstream/stackstream/services/ingest/internal/server"
)

// BenchmarkJFR: the handler's cost for the Java agent's push (a 2 s
// recording of 130 CPU and 1,867 allocation samples, 66 KB of JFR,
// gzipped in a multipart form) into a cpu and an alloc record, Kafka left
// out (ackAll).
func BenchmarkJFR(b *testing.B) {
	body, ct := jfrForm(b, agentJFR(b))
	opts := ingesttest.Options("bench.profiles.raw", nil)
	h := server.New(ackAll{}, opts, prometheusRegistry(), discard())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r, _ := http.NewRequest(http.MethodPost, ingestURL("http://x", "javaapp{hostname=java-host,env=test}", jfrQuery(time.Now())), bytes.NewReader(body))
		r.Header.Set("Content-Type", ct)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pushes/s/core")
}

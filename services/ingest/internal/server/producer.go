package server

import (
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ProducerOpts bound the producer: the buffer of records waiting for Kafka
// (beyond it requests get 429) and how long a record may wait (then its
// request gets 503).
func ProducerOpts(bufferBytes, bufferRecords int, produceTimeout time.Duration) []kgo.Opt {
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxBufferedBytes(bufferBytes),
		kgo.MaxBufferedRecords(bufferRecords),
		kgo.RecordDeliveryTimeout(produceTimeout),
		// Values are gzip of stored blocks (convert.gzipBytes): lz4 over
		// the batch compresses them for the wire and the log.
		kgo.ProducerBatchCompression(kgo.Lz4Compression()),
		// Pushes arrive one by one: a short linger batches concurrent ones.
		kgo.ProducerLinger(2 * time.Millisecond),
	}
}

// HTTPServer has the time-outs of a server facing clients: headers within
// 10 s, a body (up to 16 MiB over a slow link) within 60 s, the answer
// within the produce time-out plus 30 s.
func HTTPServer(h http.Handler, produceTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60*time.Second + produceTimeout + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

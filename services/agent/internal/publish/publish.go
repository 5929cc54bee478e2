// Package publish sends the agent's records to Kafka through one idempotent
// producer (acks=all) with a bounded buffer: while brokers are unreachable the
// buffer holds records, and what does not fit is dropped, counted and logged.
package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
)

// Config bounds the producer's buffer.
type Config struct {
	BufferRecords int
	BufferBytes   int
}

// defaultBatchBytes is franz-go's default and Kafka's default max.message.bytes.
const defaultBatchBytes = 1_000_012

// Opts returns the producer options; extra options (a test's dialer) go to
// kafka.NewClient alongside them.
func Opts(cfg Config, debuginfoTopic string) []kgo.Opt {
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxBufferedRecords(cfg.BufferRecords),
		kgo.MaxBufferedBytes(cfg.BufferBytes),
		// Values are gzip already.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytesFn(func(topic string) int32 {
			if topic == debuginfoTopic {
				return kafka.DebuginfoMaxMessageBytes
			}
			return defaultBatchBytes
		}),
	}
}

// Metrics counts what the publisher did, by record kind (cpu, memory, heap,
// debuginfo).
type Metrics struct {
	Sent    *prometheus.CounterVec
	Bytes   *prometheus.CounterVec
	Dropped *prometheus.CounterVec
	Failed  *prometheus.CounterVec
}

// NewMetrics registers the publisher metrics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_agent_records_sent_total", Help: "Records acknowledged by Kafka.",
		}, []string{"kind"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_agent_record_bytes_sent_total", Help: "Value bytes acknowledged by Kafka.",
		}, []string{"kind"}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_agent_records_dropped_total", Help: "Records dropped because the producer buffer was full (brokers unreachable).",
		}, []string{"kind"}),
		Failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_agent_records_failed_total", Help: "Records Kafka refused (too large, unknown topic, ...).",
		}, []string{"kind"}),
	}
	reg.MustRegister(m.Sent, m.Bytes, m.Dropped, m.Failed)
	return m
}

// Publisher produces records asynchronously and checks every promise.
type Publisher struct {
	cl  *kgo.Client
	log *slog.Logger
	m   *Metrics

	mu      sync.Mutex
	dropped map[string]int // since the last log line, by kind
	// OnResult, when set, sees the outcome of every record (tests).
	OnResult func(kind string, r *kgo.Record, err error)
}

// New wraps a client built with Opts.
func New(cl *kgo.Client, log *slog.Logger, m *Metrics) *Publisher {
	return &Publisher{cl: cl, log: log, m: m, dropped: map[string]int{}}
}

// Publish hands r to the producer without blocking. When the buffer is full
// the record is dropped and counted. Records are not tied to a context: once
// buffered, only a full buffer or closing the client drops them, so stopping
// the agent does not cancel what it already handed over.
func (p *Publisher) Publish(kind string, r *kgo.Record) {
	size := len(r.Value)
	p.cl.TryProduce(context.Background(), r, func(r *kgo.Record, err error) {
		switch {
		case err == nil:
			p.m.Sent.WithLabelValues(kind).Inc()
			p.m.Bytes.WithLabelValues(kind).Add(float64(size))
		case errors.Is(err, kgo.ErrMaxBuffered):
			p.m.Dropped.WithLabelValues(kind).Inc()
			p.mu.Lock()
			p.dropped[kind]++
			p.mu.Unlock()
		case errors.Is(err, context.Canceled), errors.Is(err, kgo.ErrClientClosed):
			p.m.Dropped.WithLabelValues(kind).Inc()
			p.log.Warn("record dropped at shutdown", "kind", kind, "topic", r.Topic, "err", err)
		default:
			p.m.Failed.WithLabelValues(kind).Inc()
			p.log.Error("produce record", "kind", kind, "topic", r.Topic, "bytes", size, "err", err)
		}
		if p.OnResult != nil {
			p.OnResult(kind, r, err)
		}
	})
}

// LogDrops logs, once per call, how many records were dropped since the last
// call; the agent calls it every interval so an outage is one line per
// interval, not one per record.
func (p *Publisher) LogDrops() {
	p.mu.Lock()
	d := p.dropped
	p.dropped = map[string]int{}
	p.mu.Unlock()
	for kind, n := range d {
		p.log.Warn("producer buffer full: records dropped", "kind", kind, "dropped", n,
			"buffered", p.cl.BufferedProduceRecords())
	}
}

// Buffered is the number of records waiting for the brokers.
func (p *Publisher) Buffered() int64 { return p.cl.BufferedProduceRecords() }

// Flush waits until every buffered record is acknowledged or ctx ends.
func (p *Publisher) Flush(ctx context.Context) error {
	if err := p.cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush producer: %w", err)
	}
	return nil
}

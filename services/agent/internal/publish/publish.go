// Package publish sends the agent's records to Kafka through one idempotent
// producer (acks=all) with a bounded buffer: while brokers are unreachable the
// buffer holds records, and what does not fit is dropped, counted and logged.
// A profile naming a brand-new binary is held until that binary's debuginfo
// record is acknowledged, so the symbolizer finds the symbols when it reads
// the profile.
package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
)

// Config bounds the producer's buffer.
type Config struct {
	BufferRecords int
	BufferBytes   int
}

// HoldConfig bounds how profiles wait for their debuginfo.
type HoldConfig struct {
	// Max is the longest a record waits for the acknowledgements it
	// depends on; then it is published anyway (counted).
	Max time.Duration
	// Records bounds the records waiting at once; beyond it a record is
	// published without waiting (counted).
	Records int
}

// DefaultHold: 30 s covers a broker's leader election; 64 records are more
// than 30 s of profiles at a 1 s interval.
var DefaultHold = HoldConfig{Max: 30 * time.Second, Records: 64}

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
	// Unheld counts records published before what they waited for was
	// acknowledged, by reason: failed (the debuginfo record failed),
	// timeout (not acknowledged within HoldConfig.Max), full (too many
	// records waiting).
	Unheld *prometheus.CounterVec
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
		Unheld: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_agent_profiles_before_debuginfo_total",
			Help: "Profile records published before the debuginfo of a binary they introduced was acknowledged, by reason (failed, timeout, full).",
		}, []string{"reason"}),
	}
	reg.MustRegister(m.Sent, m.Bytes, m.Dropped, m.Failed, m.Unheld)
	return m
}

// Ack is the broker's answer for one record, known once Done is closed.
type Ack struct {
	done chan struct{}
	err  error
}

// Done is closed once the record is acknowledged or failed.
func (a *Ack) Done() <-chan struct{} { return a.done }

// Err is why the record failed, nil when acknowledged; valid after Done.
func (a *Ack) Err() error { return a.err }

// held is a record waiting for acknowledgements before it is produced.
type held struct {
	kind  string
	r     *kgo.Record
	after []*Ack
	since time.Time
}

// Publisher produces records asynchronously and checks every promise.
type Publisher struct {
	cl   *kgo.Client
	log  *slog.Logger
	m    *Metrics
	hold HoldConfig

	queue   chan held
	holding atomic.Int64 // records queued or being waited for

	mu      sync.Mutex
	dropped map[string]int // since the last log line, by kind
	// OnResult, when set, sees the outcome of every record (tests).
	OnResult func(kind string, r *kgo.Record, err error)
	// OnProduce, when set, sees every record as it is handed to the
	// producer (tests).
	OnProduce func(kind string, r *kgo.Record)
}

// New wraps a client built with Opts. Records held by PublishAfter are
// produced by a goroutine that lives as long as the process.
func New(cl *kgo.Client, log *slog.Logger, m *Metrics, hold HoldConfig) *Publisher {
	p := &Publisher{cl: cl, log: log, m: m, hold: hold, dropped: map[string]int{}, queue: make(chan held, hold.Records)}
	go p.release()
	return p
}

// PublishAfter publishes r once every record of after is acknowledged or
// failed, without blocking the caller; records handed to PublishAfter are
// produced in the order of the calls. A record waits at most HoldConfig.Max
// after the call; it is published anyway when an ack fails or the wait ends,
// and counted.
func (p *Publisher) PublishAfter(kind string, r *kgo.Record, after []*Ack) {
	p.holding.Add(1)
	select {
	case p.queue <- held{kind: kind, r: r, after: after, since: time.Now()}:
	default:
		p.holding.Add(-1)
		if len(after) > 0 {
			p.m.Unheld.WithLabelValues("full").Inc()
		}
		p.Publish(kind, r)
	}
}

// release produces held records in order, each once what it waits for is
// answered or its wait is over.
func (p *Publisher) release() {
	for h := range p.queue {
		reason := ""
		timer := time.NewTimer(time.Until(h.since.Add(p.hold.Max)))
	wait:
		for _, a := range h.after {
			select {
			case <-a.done:
				if a.err != nil {
					reason = "failed"
				}
			case <-timer.C:
				reason = "timeout"
				break wait
			}
		}
		timer.Stop()
		if reason != "" {
			p.m.Unheld.WithLabelValues(reason).Inc()
			p.log.Warn("profile published before the debuginfo it names was acknowledged", "kind", h.kind, "reason", reason, "waited", time.Since(h.since).Round(time.Millisecond))
		}
		p.Publish(h.kind, h.r)
		p.holding.Add(-1)
	}
}

// Publish hands r to the producer without blocking. When the buffer is full
// the record is dropped and counted. Records are not tied to a context: once
// buffered, only a full buffer or closing the client drops them, so stopping
// the agent does not cancel what it already handed over.
func (p *Publisher) Publish(kind string, r *kgo.Record) *Ack {
	size := len(r.Value)
	ack := &Ack{done: make(chan struct{})}
	if p.OnProduce != nil {
		p.OnProduce(kind, r)
	}
	p.cl.TryProduce(context.Background(), r, func(r *kgo.Record, err error) {
		ack.err = err
		defer close(ack.done)
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
	return ack
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

// Buffered is the number of records waiting for the brokers, or held for
// their debuginfo.
func (p *Publisher) Buffered() int64 { return p.cl.BufferedProduceRecords() + p.holding.Load() }

// Flush waits until every held record is produced and every buffered record
// is acknowledged, or ctx ends.
func (p *Publisher) Flush(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for p.holding.Load() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("flush producer: %d records still held for their debuginfo: %w", p.holding.Load(), ctx.Err())
		case <-tick.C:
		}
	}
	if err := p.cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush producer: %w", err)
	}
	return nil
}

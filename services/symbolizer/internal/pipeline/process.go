// Package pipeline is the symbolizer's consume-transform-produce loop:
// records of profiles.raw in, symbolized profiles (or dead letters) out, in
// Kafka transactions with the consumed offsets.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symbolize"
)

// ServiceName is written into DLQ records.
const ServiceName = "stackstream-symbolizer"

var (
	// ErrOutputTooLarge means one sample of the symbolized profile does not
	// fit in a record even alone.
	ErrOutputTooLarge = errors.New("symbolized sample too large")
	// ErrPanic means processing a record panicked: a bug, reached through
	// the record's content, that the recover at the record boundary caught.
	ErrPanic = errors.New("panic while processing record")
)

// recordOverhead is what a record adds to its value, key and headers inside
// a batch (lengths, offsets, timestamps as varints), with room to spare.
const recordOverhead = 64

// Processor turns one raw record into its output records.
type Processor struct {
	Symbolizer *symbolize.Symbolizer
	Topics     record.Topics
	// MaxOutputBytes bounds one output record: value, key and headers.
	// A symbolized profile larger than that is split into parts that fit.
	MaxOutputBytes int
	// Limits are the decode limits of the consumers of the output (the
	// indexer and rollup decode with record.DefaultLimits, the zero
	// value here): a symbolized profile past them, as symbolization adds
	// functions and lines, is split like one too large.
	Limits record.Limits
	// Log receives the stack of a recovered panic; nil discards it.
	Log *slog.Logger
	// OnPanic counts recovered panics as they happen (not at commit).
	OnPanic func()
}

// Result is what to produce for one input, and what happened.
type Result struct {
	// Out holds the symbolized profile, or its parts when it had to be
	// split, or one dead letter. A part whose single sample does not fit
	// in a record is a dead letter among the parts.
	Out    []*kgo.Record
	Err    error  // why (part of) the input went to the DLQ; nil when none did
	Reason string // short label of Err for metrics
	Parts  int    // symbolized records in Out
	Stats  symbolize.Stats
}

// Process symbolizes r. It never fails and never panics: input that cannot
// be processed becomes a DLQ record carrying the reason and the original
// coordinates, and a panic on the way (the last line of defence; each cause
// found gets its own fix) becomes the DLQ reason "panic".
func (p *Processor) Process(ctx context.Context, r *kgo.Record) (res Result) {
	defer func() {
		if v := recover(); v != nil {
			if p.OnPanic != nil {
				p.OnPanic()
			}
			if p.Log != nil {
				p.Log.Error("recovered panic, sending record to dlq", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			}
			res = p.dead(r, fmt.Errorf("%w: %v", ErrPanic, v))
		}
	}()
	return p.process(ctx, r)
}

func (p *Processor) process(ctx context.Context, r *kgo.Record) Result {
	if _, err := record.ParseMeta(r.Headers); err != nil {
		return p.dead(r, err)
	}
	limit := p.valueLimit(r)
	if limit < p.MaxOutputBytes/2 {
		return p.dead(r, fmt.Errorf("%w: key and headers take %d of the %d bytes of a record (STACKSTREAM_SYMBOLIZER_MAX_OUTPUT_BYTES)", record.ErrTooLarge, p.MaxOutputBytes-limit, p.MaxOutputBytes))
	}
	lim := p.Limits
	if lim == (record.Limits{}) {
		lim = record.DefaultLimits()
	}
	if val, st, ok := p.fast(ctx, r.Value, limit, lim); ok {
		return Result{Stats: st, Parts: 1, Out: []*kgo.Record{{
			Topic:     p.Topics.ProfilesSymbolized,
			Key:       r.Key,
			Value:     val,
			Headers:   r.Headers,
			Timestamp: r.Timestamp,
		}}}
	}
	prof, err := record.DecodeProfile(r.Value)
	if err != nil {
		return p.dead(r, err)
	}
	st := p.Symbolizer.Profile(ctx, prof)
	pieces, err := splitToFit(prof, limit, lim)
	if err != nil {
		return p.dead(r, err)
	}
	res := Result{Stats: st}
	parent := record.HeaderValue(r.Headers, record.HeaderPart)
	for i, pc := range pieces {
		h := r.Headers
		if len(pieces) > 1 {
			h = withHeader(r.Headers, record.HeaderPart, record.SubPart(parent, i))
		}
		if pc.oversized != nil {
			// One sample that fits no record: it goes to the DLQ as the
			// part it would have been, and the other parts go on.
			val, eerr := record.EncodeProfile(pc.oversized)
			if eerr != nil {
				return p.dead(r, eerr)
			}
			cut := *r
			cut.Value, cut.Headers = val, h
			res.Err = fmt.Errorf("%w: %d bytes gzip, limit %d (STACKSTREAM_SYMBOLIZER_MAX_OUTPUT_BYTES less key and headers), or past the decode limits of schemas/kafka.md", ErrOutputTooLarge, len(val), limit)
			res.Reason = Reason(res.Err)
			res.Out = append(res.Out, record.DLQRecord(p.Topics.DLQ, ServiceName, &cut, res.Err))
			continue
		}
		res.Out = append(res.Out, &kgo.Record{
			Topic:     p.Topics.ProfilesSymbolized,
			Key:       r.Key,
			Value:     pc.value,
			Headers:   h,
			Timestamp: r.Timestamp,
		})
		res.Parts++
	}
	return res
}

// valueLimit is how many bytes of an output record are left for the value
// once r's key and headers (which the output keeps) are counted.
func (p *Processor) valueLimit(r *kgo.Record) int {
	n := len(r.Key) + recordOverhead + len(record.HeaderPart) + 16
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 8
	}
	return p.MaxOutputBytes - n
}

// withHeader is h with key set to value (replaced, or appended), copied.
func withHeader(h []kgo.RecordHeader, key, value string) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, 0, len(h)+1)
	for _, x := range h {
		if x.Key != key {
			out = append(out, x)
		}
	}
	return append(out, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func (p *Processor) dead(r *kgo.Record, err error) Result {
	return Result{
		Out:    []*kgo.Record{record.DLQRecord(p.Topics.DLQ, ServiceName, r, err)},
		Err:    err,
		Reason: Reason(err),
	}
}

// Reason labels err for the DLQ metric.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrPanic):
		return "panic"
	case errors.Is(err, record.ErrUnknownSchemaVersion):
		return "schema_version"
	case errors.Is(err, record.ErrMissingHeader):
		return "missing_header"
	case errors.Is(err, record.ErrUnknownProfileType):
		return "profile_type"
	case errors.Is(err, record.ErrTooLarge):
		return "too_large"
	case errors.Is(err, record.ErrInvalidProfile):
		return "invalid_profile"
	case errors.Is(err, record.ErrNotGzip):
		return "not_gzip"
	case errors.Is(err, record.ErrNotPprof):
		return "not_pprof"
	case errors.Is(err, ErrOutputTooLarge):
		return "output_too_large"
	default:
		return "other"
	}
}

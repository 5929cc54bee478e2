// Package pipeline is the symbolizer's consume-transform-produce loop:
// records of profiles.raw in, symbolized profiles (or dead letters) out, in
// Kafka transactions with the consumed offsets.
package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symbolize"
)

// ServiceName is written into DLQ records.
const ServiceName = "stackstream-symbolizer"

// ErrOutputTooLarge means the symbolized profile would not fit in one record.
var ErrOutputTooLarge = errors.New("symbolized profile too large")

// Processor turns one raw record into its output record.
type Processor struct {
	Symbolizer     *symbolize.Symbolizer
	Topics         record.Topics
	MaxOutputBytes int
}

// Result is the record to produce for one input, and what happened.
type Result struct {
	Out    *kgo.Record
	Err    error  // why Out is a dead letter; nil when it is the symbolized profile
	Reason string // short label of Err for metrics
	Stats  symbolize.Stats
}

// Process symbolizes r. It never fails: input that cannot be processed
// becomes a DLQ record carrying the reason and the original coordinates.
func (p *Processor) Process(ctx context.Context, r *kgo.Record) Result {
	if _, err := record.ParseMeta(r.Headers); err != nil {
		return p.dead(r, err)
	}
	prof, err := record.DecodeProfile(r.Value)
	if err != nil {
		return p.dead(r, err)
	}
	st := p.Symbolizer.Profile(ctx, prof)
	// Stored gzip: the producer compresses batches (lz4), so every consumer
	// group reads the profile without inflating it. One too large for the
	// topic that way is compressed instead.
	val, err := record.EncodeProfileStored(prof)
	if err == nil && p.MaxOutputBytes > 0 && len(val) > p.MaxOutputBytes {
		val, err = record.EncodeProfile(prof)
	}
	if err != nil {
		return p.dead(r, err)
	}
	if p.MaxOutputBytes > 0 && len(val) > p.MaxOutputBytes {
		return p.dead(r, fmt.Errorf("%w: %d bytes gzip, limit %d (STACKSTREAM_SYMBOLIZER_MAX_OUTPUT_BYTES)", ErrOutputTooLarge, len(val), p.MaxOutputBytes))
	}
	out := &kgo.Record{
		Topic:     p.Topics.ProfilesSymbolized,
		Key:       r.Key,
		Value:     val,
		Headers:   r.Headers,
		Timestamp: r.Timestamp,
	}
	return Result{Out: out, Stats: st}
}

func (p *Processor) dead(r *kgo.Record, err error) Result {
	return Result{
		Out:    record.DLQRecord(p.Topics.DLQ, ServiceName, r, err),
		Err:    err,
		Reason: Reason(err),
	}
}

// Reason labels err for the DLQ metric.
func Reason(err error) string {
	switch {
	case errors.Is(err, record.ErrUnknownSchemaVersion):
		return "schema_version"
	case errors.Is(err, record.ErrMissingHeader):
		return "missing_header"
	case errors.Is(err, record.ErrUnknownProfileType):
		return "profile_type"
	case errors.Is(err, record.ErrTooLarge):
		return "too_large"
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

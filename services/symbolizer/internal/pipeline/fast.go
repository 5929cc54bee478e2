package pipeline

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"sync"

	kgzip "github.com/klauspost/compress/gzip"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/symbolizer/internal/pproftables"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symbolize"
)

// buffers keeps the inflated input and the encoded output of a record
// between records: both are copied before they leave fast.
type buffers struct {
	zr   *kgzip.Reader
	in   bytes.Buffer
	out  []byte
	prof pproftables.Profile
	sym  symbolize.Scratch
}

var bufferPool = sync.Pool{New: func() any { return new(buffers) }}

// fast symbolizes a raw record value without decoding its samples: only
// the tables the symbolizer changes are decoded and re-encoded
// (pproftables), and the result is written as stored gzip. ok is false
// when the record needs the full path: a value that is not a gzip pprof
// within the decode limits, a profile pproftables does not rewrite, or an
// output that does not fit one record (split) or the consumers' limits.
// The full path then gives the exact result or error.
func (p *Processor) fast(ctx context.Context, value []byte, limit int, lim record.Limits) (val []byte, st symbolize.Stats, ok bool) {
	// The input is decoded within record.DefaultLimits (DecodeProfile's),
	// the output checked against lim: with other limits the full path
	// checks both.
	if lim != record.DefaultLimits() {
		return nil, st, false
	}
	bufs := bufferPool.Get().(*buffers)
	defer bufferPool.Put(bufs)
	raw, ok := bufs.inflate(value, lim.MaxDecompressedBytes)
	if !ok {
		return nil, st, false
	}
	prof := &bufs.prof
	if err := prof.Decode(raw, lim); err != nil {
		return nil, st, false
	}
	st = p.Symbolizer.Locations(ctx, prof.Tables, prof.CallerOnly, &bufs.sym)
	out := prof.Append(bufs.out[:0])
	bufs.out = out[:0] // keeps a grown buffer for the next record
	// The output holds every sample, label, location, function and
	// string of the input, and more lines and functions: when it is
	// within the limits and not shorter, so was the input (Limits counts
	// and estimates from the length), and the input needs no check of
	// its own.
	if len(out) >= limit || len(out) < len(raw) || !prof.OutputWithinLimits(out) {
		return nil, st, false
	}
	val, err := gzipLevel(out, gzip.NoCompression)
	if err != nil || len(val) > limit {
		return nil, st, false
	}
	return val, st, true
}

// inflate returns value's content (klauspost's gzip reader: about twice
// as fast as the standard library's at inflating the agent's records), read into bufs, when value is gzip
// within limit bytes.
func (b *buffers) inflate(value []byte, limit int) ([]byte, bool) {
	b.in.Reset()
	if out, ok := record.AppendStored(b.in.AvailableBuffer(), value); ok {
		b.in.Write(out)
		return b.in.Bytes(), len(out) <= limit
	}
	r := bytes.NewReader(value)
	if b.zr == nil {
		zr, err := kgzip.NewReader(r)
		if err != nil {
			return nil, false
		}
		b.zr = zr
	} else if err := b.zr.Reset(r); err != nil {
		return nil, false
	}
	if _, err := b.in.ReadFrom(io.LimitReader(b.zr, int64(limit)+1)); err != nil {
		return nil, false
	}
	return b.in.Bytes(), b.in.Len() <= limit
}

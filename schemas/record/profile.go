package record

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/google/pprof/profile"
)

// MaxProfileBytes bounds the decompressed size of one profile, so a hostile or
// broken record cannot exhaust a consumer's memory. It is the default of
// Limits.MaxDecompressedBytes.
const MaxProfileBytes = 32 << 20

// EncodeProfile serializes p as gzip-compressed pprof, the record value format.
func EncodeProfile(p *profile.Profile) ([]byte, error) {
	var buf bytes.Buffer
	// profile.Write gzips its output.
	if err := p.Write(&buf); err != nil {
		return nil, fmt.Errorf("encode profile: %w", err)
	}
	return buf.Bytes(), nil
}

// EncodeProfileStored serializes p as gzip pprof whose deflate blocks are
// stored, not compressed: still a gzip pprof file (go tool pprof opens it),
// but reading it costs a copy and a checksum instead of inflating, which was
// a third of the indexer's CPU per profile. It is for topics whose producer
// compresses whole batches (lz4), so Kafka still stores and sends them
// compressed.
func EncodeProfileStored(p *profile.Profile) ([]byte, error) {
	return EncodeProfileLevel(p, gzip.NoCompression)
}

// EncodeProfileLevel serializes p as gzip pprof at a compress/gzip level.
func EncodeProfileLevel(p *profile.Profile, level int) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, level)
	if err != nil {
		return nil, fmt.Errorf("encode profile: %w", err)
	}
	if err := p.WriteUncompressed(zw); err != nil {
		return nil, fmt.Errorf("encode profile: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("encode profile: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeProfile parses a record value within DefaultLimits.
func DecodeProfile(value []byte) (*profile.Profile, error) {
	return DecodeProfileLimits(value, DefaultLimits())
}

// DecodeProfileLimits parses a record value. It rejects values that are not
// gzip (ErrNotGzip), decompress beyond l.MaxDecompressedBytes or hold more
// than l allows (ErrTooLarge), are not pprof (ErrNotPprof), or are pprof that
// is not self-consistent (ErrInvalidProfile). Memory is bounded as it goes:
// the decompressed bytes by the limit, everything else by l.Check before
// the pprof parser allocates.
func DecodeProfileLimits(value []byte, l Limits) (*profile.Profile, error) {
	if !isGzip(value) {
		return nil, ErrNotGzip
	}
	var raw []byte
	ok := false
	if len(value) > 10 && value[10]&6 == 0 { // the first deflate block is stored
		raw, ok = appendStored(make([]byte, 0, statedSize(value, l.MaxDecompressedBytes)), value, l.MaxDecompressedBytes)
	}
	if !ok {
		var err error
		if raw, err = gunzip(value, l.MaxDecompressedBytes); err != nil {
			return nil, err
		}
	}
	return ParseProfile(raw, l)
}

// maxDeflateRatio is the most deflate expands: 258 bytes per 2-bit code,
// about 1032 to 1.
const maxDeflateRatio = 1032

// statedSize is the content size the gzip trailer of value states, or 0
// when it is beyond limit or beyond what deflate can expand value to: a
// hint to size buffers, so a few junk bytes cannot claim a big buffer.
func statedSize(value []byte, limit int) int {
	if len(value) < 18 {
		return 0
	}
	size := int(binary.LittleEndian.Uint32(value[len(value)-4:]))
	if size > limit || size > len(value)*maxDeflateRatio {
		return 0
	}
	return size
}

// ParseProfile parses an uncompressed pprof protobuf within l: l.Check
// first, then the pprof parser, then pprof's own consistency check, so that
// every location, mapping and function a profile refers to exists (no nil
// *profile.Location in a sample) and every sample has one value per sample
// type.
func ParseProfile(raw []byte, l Limits) (*profile.Profile, error) {
	if err := l.Check(raw); err != nil {
		return nil, err
	}
	p, err := profile.ParseUncompressed(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotPprof, err)
	}
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidProfile, err)
	}
	return p, nil
}

// gunzip decompresses value up to limit bytes. The buffer is sized from the
// size the gzip trailer states (when within the limit), so a valid value is
// read without growing and copying it.
func gunzip(value []byte, limit int) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(value))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotGzip, err)
	}
	var buf bytes.Buffer
	buf.Grow(statedSize(value, limit) + bytes.MinRead)
	if _, err := buf.ReadFrom(io.LimitReader(zr, int64(limit)+1)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotGzip, err)
	}
	if buf.Len() > limit {
		return nil, tooLarge("decompressed bytes", buf.Len(), limit)
	}
	return buf.Bytes(), nil
}

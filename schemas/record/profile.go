package record

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"

	"github.com/google/pprof/profile"
)

// MaxProfileBytes bounds the decompressed size of one profile, so a hostile or
// broken record cannot exhaust a consumer's memory.
const MaxProfileBytes = 64 << 20

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

// DecodeProfile parses a record value. It rejects values that are not gzip,
// decompress beyond MaxProfileBytes, or are not valid pprof.
func DecodeProfile(value []byte) (*profile.Profile, error) {
	if !isGzip(value) {
		return nil, ErrNotGzip
	}
	raw, ok := AppendStored(nil, value)
	if !ok {
		var err error
		if raw, err = gunzip(value); err != nil {
			return nil, err
		}
	}
	p, err := profile.ParseUncompressed(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotPprof, err)
	}
	return p, nil
}

func gunzip(value []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(value))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotGzip, err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, MaxProfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotGzip, err)
	}
	if len(raw) > MaxProfileBytes {
		return nil, fmt.Errorf("%w: decompressed beyond %d bytes", ErrTooLarge, MaxProfileBytes)
	}
	return raw, nil
}

package convert

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/google/pprof/profile"
	"github.com/klauspost/compress/gzip"

	"github.com/stackstream/stackstream/schemas/record"
)

// DecodePprof reads a pprof body in any form google/pprof reads: protobuf,
// gzip or not, or a legacy text format. Protobuf is checked against l
// before the parser allocates; a legacy profile is bounded by the body
// limit, and its encoding is checked against l before it is produced.
func DecodePprof(data []byte, l record.Limits) (*profile.Profile, error) {
	raw := data
	if bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		var err error
		if raw, err = Gunzip(data, l.MaxDecompressedBytes); err != nil {
			return nil, err
		}
	}
	err := l.Check(raw)
	if err == nil {
		p, err := profile.ParseUncompressed(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", record.ErrNotPprof, err)
		}
		if err := p.CheckValid(); err != nil {
			return nil, fmt.Errorf("%w: %v", record.ErrInvalidProfile, err)
		}
		return p, nil
	}
	if errors.Is(err, record.ErrTooLarge) {
		return nil, err
	}
	p, lerr := profile.ParseData(raw)
	if lerr != nil {
		return nil, fmt.Errorf("%w: neither protobuf (%v) nor a legacy pprof format (%v)", record.ErrNotPprof, err, lerr)
	}
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("%w: %v", record.ErrInvalidProfile, err)
	}
	return p, nil
}

// Gunzip inflates data up to limit bytes.
func Gunzip(data []byte, limit int) ([]byte, error) {
	return gunzipInto(new(bytes.Buffer), data, limit)
}

var readerPool sync.Pool

func gunzipInto(buf *bytes.Buffer, data []byte, limit int) ([]byte, error) {
	buf.Reset()
	zr, _ := readerPool.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(bytes.NewReader(data))
	} else {
		err = zr.Reset(bytes.NewReader(data))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", record.ErrNotGzip, err)
	}
	defer readerPool.Put(zr)
	// Sized from the size the gzip trailer states, within the limit.
	if n := len(data); n >= 18 {
		if size := int(uint32(data[n-4]) | uint32(data[n-3])<<8 | uint32(data[n-2])<<16 | uint32(data[n-1])<<24); size <= limit && size <= n*1032 {
			buf.Grow(size + bytes.MinRead)
		}
	}
	if _, err := buf.ReadFrom(io.LimitReader(zr, int64(limit)+1)); err != nil {
		return nil, fmt.Errorf("%w: %v", record.ErrNotGzip, err)
	}
	if buf.Len() > limit {
		return nil, fmt.Errorf("%w: decompressed body exceeds %d bytes", record.ErrTooLarge, limit)
	}
	return buf.Bytes(), nil
}

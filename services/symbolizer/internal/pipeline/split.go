package pipeline

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
)

// encodeFitting returns p as a record value of at most limit bytes: stored
// gzip when that fits (every consumer then reads it without inflating),
// else gzip-compressed, else nil. It is nil too when p exceeds lim, the
// decode limits of the consumers downstream (a part of it may not). size
// is the gzip size of a p that does not fit, 0 when not known.
func encodeFitting(p *profile.Profile, limit int, lim record.Limits) (val []byte, size int, err error) {
	var raw bytes.Buffer
	if err := p.WriteUncompressed(&raw); err != nil {
		return nil, 0, fmt.Errorf("encode profile: %w", err)
	}
	if err := lim.Check(raw.Bytes()); errors.Is(err, record.ErrTooLarge) {
		return nil, 0, nil
	} else if err != nil {
		return nil, 0, fmt.Errorf("check symbolized profile: %w", err)
	}
	if raw.Len() < limit {
		if val, err := gzipLevel(raw.Bytes(), gzip.NoCompression); err != nil || len(val) <= limit {
			return val, 0, err
		}
	}
	val, err = gzipLevel(raw.Bytes(), gzip.DefaultCompression)
	if err != nil {
		return nil, 0, err
	}
	if len(val) > limit {
		return nil, len(val), nil
	}
	return val, 0, nil
}

// gzipWriters hold one pool per level used: a gzip.Writer allocates its
// deflate state (hundreds of KB, zeroed) when made, which cost more than
// the whole symbolization of a record; Reset reuses it.
var gzipWriters = map[int]*sync.Pool{
	gzip.NoCompression:      {New: func() any { return newGzipWriter(gzip.NoCompression) }},
	gzip.DefaultCompression: {New: func() any { return newGzipWriter(gzip.DefaultCompression) }},
}

func newGzipWriter(level int) *gzip.Writer {
	zw, err := gzip.NewWriterLevel(io.Discard, level)
	if err != nil {
		panic(err) // the levels above are valid
	}
	return zw
}

// gzipLevel compresses raw at level, one of gzipWriters' levels.
func gzipLevel(raw []byte, level int) ([]byte, error) {
	pool := gzipWriters[level]
	zw := pool.Get().(*gzip.Writer)
	defer pool.Put(zw)
	// A stored block adds 5 bytes per 64 KiB; compressed output is
	// smaller than raw for any profile.
	buf := bytes.NewBuffer(make([]byte, 0, len(raw)+len(raw)/8192+64))
	zw.Reset(buf)
	if _, err := zw.Write(raw); err != nil {
		return nil, fmt.Errorf("encode profile: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("encode profile: %w", err)
	}
	return buf.Bytes(), nil
}

// piece is one part of a split profile: its value, or the single sample
// that does not fit in a record even alone.
type piece struct {
	value     []byte
	oversized *profile.Profile
}

// splitToFit encodes p into values of at most limit bytes each. A profile
// that does not fit is split by samples into parts that each carry only the
// mappings, locations and functions their samples use (the encoder writes
// only the strings these name), with p's time, duration, types and
// comments, so every part is a complete profile and the values of the
// parts add up to p's. Parts come out in sample order.
func splitToFit(p *profile.Profile, limit int, lim record.Limits) ([]piece, error) {
	var out []piece
	var fit func(q *profile.Profile) error
	fit = func(q *profile.Profile) error {
		val, size, err := encodeFitting(q, limit, lim)
		if err != nil {
			return err
		}
		if val != nil {
			out = append(out, piece{value: val})
			return nil
		}
		if len(q.Sample) <= 1 {
			out = append(out, piece{oversized: q})
			return nil
		}
		// Cut into as many parts as the size suggests (a quarter more, as
		// parts repeat the locations they share), at least two (over the
		// decode limits, size is 0: halves); a part that still does not
		// fit is cut again.
		n := min(len(q.Sample), max(2, (size/limit)*5/4+1))
		for i := 0; i < n; i++ {
			lo, hi := i*len(q.Sample)/n, (i+1)*len(q.Sample)/n
			if err := fit(subProfile(q, q.Sample[lo:hi])); err != nil {
				return err
			}
		}
		return nil
	}
	if err := fit(p); err != nil {
		return nil, err
	}
	return out, nil
}

// subProfile is p with only samples and what they reference. Mappings,
// locations and functions are shared with p, keeping their IDs.
func subProfile(p *profile.Profile, samples []*profile.Sample) *profile.Profile {
	q := &profile.Profile{
		SampleType:        p.SampleType,
		DefaultSampleType: p.DefaultSampleType,
		Sample:            samples,
		Comments:          p.Comments,
		DocURL:            p.DocURL,
		DropFrames:        p.DropFrames,
		KeepFrames:        p.KeepFrames,
		TimeNanos:         p.TimeNanos,
		DurationNanos:     p.DurationNanos,
		PeriodType:        p.PeriodType,
		Period:            p.Period,
	}
	locs := map[*profile.Location]bool{}
	funcs := map[*profile.Function]bool{}
	maps := map[*profile.Mapping]bool{}
	for _, s := range samples {
		for _, l := range s.Location {
			if locs[l] {
				continue
			}
			locs[l] = true
			q.Location = append(q.Location, l)
			if m := l.Mapping; m != nil && !maps[m] {
				maps[m] = true
				q.Mapping = append(q.Mapping, m)
			}
			for _, ln := range l.Line {
				if f := ln.Function; f != nil && !funcs[f] {
					funcs[f] = true
					q.Function = append(q.Function, f)
				}
			}
		}
	}
	return q
}

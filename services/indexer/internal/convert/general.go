package convert

import (
	"bytes"
	stdgzip "compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"time"
	"unsafe"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pprofx"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// decodeConvert is the general path: google/pprof's decoder within limits,
// then Convert. Its errors are what the DLQ records say.
func decodeConvert(limits record.Limits, names indices.Names, meta record.Meta, part string, value []byte, fallback time.Time) (Documents, error) {
	// record.DecodeProfile, decompressing here: the documents' budget is
	// relative to the protobuf's size.
	raw, err := inflate(value, limits.MaxDecompressedBytes)
	if err != nil {
		return Documents{}, fmt.Errorf("decode profile: %w", err)
	}
	p, err := record.ParseProfile(raw, limits)
	if err != nil {
		return Documents{}, fmt.Errorf("decode profile: %w", err)
	}
	// pprof leaves a sample's location nil when its ID is not in the
	// location table; the frames would dereference it.
	for _, s := range p.Sample {
		for _, loc := range s.Location {
			if loc == nil {
				return Documents{}, fmt.Errorf("decode profile: %w: a sample references an unknown location", record.ErrInvalidProfile)
			}
		}
	}
	docs, err := convert(names, meta, part, p, fallback, docBudget(len(raw)))
	if err != nil {
		return Documents{}, fmt.Errorf("convert profile: %w", err)
	}
	return docs, nil
}

// Convert turns a decoded profile into documents. host comes from the record
// header (or the sample's host label when the header is empty); part is the
// record's record.HeaderPart ("" when the profile was not split); fallback
// is the time used when the profile carries none (the record's timestamp).
func Convert(names indices.Names, meta record.Meta, part string, p *profile.Profile, fallback time.Time) (Documents, error) {
	return convert(names, meta, part, p, fallback, math.MaxInt)
}

// convert is Convert whose samples documents may take at most budget bytes.
func convert(names indices.Names, meta record.Meta, part string, p *profile.Profile, fallback time.Time, budget int) (Documents, error) {
	if len(p.SampleType) == 0 {
		return Documents{}, fmt.Errorf("profile has no sample types")
	}
	h := newHeader(names, meta, part, p, fallback)
	valueIdx, countIdx, at := h.valueIdx, h.countIdx, h.at

	// One document per label set (a process, mostly) with every stack it
	// was seen in: see schemas/indices/stackvalues.go.
	type agg struct {
		doc    indices.SampleDoc
		raw    int64
		ls     *labelSet
		stacks map[string]int // stack ID -> index in ids and values
		ids    []string
		values []int64
	}
	labelSets := labelSets{}
	merged := map[string]*agg{} // by labelSet.key
	var order []*agg
	docs := Documents{At: at}
	seenStack := map[string]bool{}
	stackByLocs := map[string]string{}
	var locKey []byte
	for _, s := range p.Sample {
		if valueIdx >= len(s.Value) {
			return Documents{}, fmt.Errorf("sample has %d values, profile declares %d sample types", len(s.Value), len(p.SampleType))
		}
		v := s.Value[valueIdx]
		if v < 0 {
			return Documents{}, fmt.Errorf("sample has a negative value %d", v)
		}
		// Samples of one stack in several processes share their locations:
		// frames and hash are computed once per location sequence. Locations
		// are keyed by address, not by their ID, which a broken profile may
		// repeat; the profile outlives this loop, so addresses are stable.
		locKey = locKey[:0]
		for _, loc := range s.Location {
			locKey = binary.LittleEndian.AppendUint64(locKey, uint64(uintptr(unsafe.Pointer(loc))))
		}
		stackID, ok := stackByLocs[string(locKey)]
		if !ok {
			if frames := pprofx.StackFrames(s); len(frames) > 0 {
				stackID = indices.StackID(frames)
				if !seenStack[stackID] {
					seenStack[stackID] = true
					docs.Stacks = append(docs.Stacks, Stack{ID: stackID, Frames: frames, At: at})
				}
			}
			stackByLocs[string(locKey)] = stackID
		}
		ls := labelSets.get(s.Label, meta.Host)
		if ls.err != nil {
			return Documents{}, ls.err
		}
		if labelSets.bytes > budget {
			return Documents{}, errDocumentsTooLarge(budget)
		}
		raw := int64(1)
		if countIdx >= 0 && countIdx < len(s.Value) {
			raw = s.Value[countIdx]
		}
		a := merged[ls.key]
		if a == nil {
			a = &agg{doc: ls.doc(at, meta.Type), ls: ls, stacks: map[string]int{}}
			merged[ls.key] = a
			order = append(order, a)
			docs.Labels.add(ls.drops)
		}
		a.doc.Value += v
		a.doc.Count += raw
		a.raw += raw
		if stackID == "" {
			continue // counted in the total only (memory samples have no stack)
		}
		i, ok := a.stacks[stackID]
		if !ok {
			i = len(a.ids)
			a.stacks[stackID] = i
			a.ids = append(a.ids, stackID)
			a.values = append(a.values, 0)
		}
		a.values[i] += v
	}
	docs.Samples = make([]Sample, 0, len(order))
	size := 0
	for _, a := range order {
		sample, err := h.sample(&a.doc, a.ls, a.ids, a.values, a.raw)
		if err != nil {
			return Documents{}, err
		}
		if size += len(sample.Doc); size > budget {
			return Documents{}, errDocumentsTooLarge(budget)
		}
		docs.Samples = append(docs.Samples, sample)
	}
	return docs, nil
}

// inflate is the protobuf of a record value as record.DecodeProfile reads
// it: stored gzip copied, other gzip inflated (compress/gzip), at most limit
// bytes (else ErrTooLarge); ErrNotGzip for anything else.
func inflate(value []byte, limit int) ([]byte, error) {
	if len(value) < 2 || value[0] != 0x1f || value[1] != 0x8b {
		return nil, record.ErrNotGzip
	}
	if raw, ok := record.AppendStored(nil, value); ok && len(raw) <= limit {
		return raw, nil
	}
	zr, err := stdgzip.NewReader(bytes.NewReader(value))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", record.ErrNotGzip, err)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(zr, int64(limit)+1)); err != nil {
		return nil, fmt.Errorf("%w: %v", record.ErrNotGzip, err)
	}
	if buf.Len() > limit {
		return nil, fmt.Errorf("%w: decompressed bytes: more than %d", record.ErrTooLarge, limit)
	}
	return buf.Bytes(), nil
}

// Package convert turns the value of a profile record (gzip pprof) into the
// documents of the stacks and samples indices (schemas/opensearch.md).
//
// Two paths give the same documents. The fast path (fast.go) walks the
// protobuf once with a decoder of its own (decoder.go over wire.go) and keeps
// stacks and label sets across profiles (tables.go): it takes the profiles
// agents and the symbolizer write. Anything else, every error included, takes
// the general path (general.go): google/pprof's parser, then Convert, whose
// errors say what is wrong. Both build the documents alike (documents.go,
// labels.go).
package convert

import (
	"errors"
	"fmt"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// Limits bound the conversion of one record.
type Limits struct {
	// Decode bounds the protobuf on both paths: decompressed bytes, counts,
	// stack depth, string bytes, estimated decode heap. A record beyond one
	// gets an error wrapping record.ErrTooLarge.
	Decode record.Limits
	// Heavy bounds the records decoded on the general path at once, and the
	// fast path's profiles of 1 MiB of protobuf or more: google/pprof's
	// parser may allocate up to Decode.MaxDecodeHeapBytes for one profile,
	// and a stream of hostile records would all take that path. Agent- and
	// symbolizer-shaped profiles (under 1 MiB) are not held.
	Heavy int
}

// DefaultLimits are record.DefaultLimits, one heavy record at a time.
func DefaultLimits() Limits { return Limits{Decode: record.DefaultLimits(), Heavy: 1} }

// ErrHostTooLong: a host name longer than record.MaxHostBytes is not a real
// host's, and cutting it could merge two hosts: the record goes to the DLQ.
var ErrHostTooLong = errors.New("host name too long")

// CheckHost returns an error wrapping ErrHostTooLong when host is longer than
// record.MaxHostBytes.
func CheckHost(host string) error {
	if len(host) > record.MaxHostBytes {
		return fmt.Errorf("%w: %d bytes, at most %d: %q...", ErrHostTooLong, len(host), record.MaxHostBytes, record.TruncateUTF8(host, 64))
	}
	return nil
}

// Path is how a record was converted.
type Path string

// The paths.
const (
	Fast    Path = "fast"    // agent- and symbolizer-shaped pprof
	General Path = "general" // anything else, errors included
)

// Converter converts records. It is safe for concurrent use, and meant to be
// shared by the workers of one process: its caches serve them all.
type Converter struct {
	limits Limits
	fast   *fastPath
	// heavy holds Limits.Heavy tokens, shared by both paths.
	heavy chan struct{}
}

// New returns a Converter within l (a zero Heavy is 1).
func New(l Limits) *Converter {
	l.Heavy = max(l.Heavy, 1)
	c := &Converter{limits: l, fast: newFastPath(l.Decode), heavy: make(chan struct{}, l.Heavy)}
	c.fast.heavy = c.heavy
	return c
}

// CacheFill is how many entries one of the Converter's bounded caches
// holds, and its bound (pkg/cache: its older half is dropped when the newer is full).
type CacheFill struct {
	Name         string // stack_ids, label_sets
	Entries, Max int
}

// Caches reports the fast path's caches: the stack IDs by location hash
// and the label sets.
func (c *Converter) Caches() []CacheFill {
	return []CacheFill{
		{Name: "stack_ids", Entries: c.fast.stacks.Len(), Max: stackCacheEntries},
		{Name: "label_sets", Entries: c.fast.labels.Len(), Max: labelCacheEntries},
	}
}

// Known reports whether the document of the stack id is stored, or being
// stored, for the day of at: the stack's frames are then not needed. It is
// called from several goroutines at once.
type Known func(id string, at time.Time) bool

// Record turns a record value into its documents, and says which path did.
// A stack that known (when not nil) reports stored may come without its
// frames (Stack.Known): the fast path then skips building them.
// names name the indices; meta.Host is the record's host (the sample's host
// label is taken when it is empty); part is the record's record.HeaderPart
// ("" when the profile was not split); fallback is the time of a profile
// that carries none (the record's timestamp). The error wraps
// record.ErrNotGzip, ErrNotPprof, ErrTooLarge or ErrInvalidProfile, or
// ErrHostTooLong.
func (c *Converter) Record(names indices.Names, meta record.Meta, part string, value []byte, fallback time.Time, known Known) (Documents, Path, error) {
	if docs, ok := c.fast.convert(names, meta, part, value, fallback, known); ok {
		return docs, Fast, nil
	}
	c.heavy <- struct{}{}
	defer func() { <-c.heavy }() // also when it panics
	docs, err := decodeConvert(c.limits.Decode, names, meta, part, value, fallback)
	return docs, General, err
}

package indexer

import (
	"bytes"
	stdgzip "compress/gzip"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/google/pprof/profile"
	"github.com/klauspost/compress/gzip"

	"github.com/stackstream/stackstream/pkg/pprofx"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// decodeConvert is the general path: google/pprof's decoder within
// record.DefaultLimits, then Convert. Its errors are what the DLQ records say.
func decodeConvert(names indices.Names, meta record.Meta, part string, value []byte, fallback time.Time) (Documents, error) {
	limits := record.DefaultLimits()
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

// fastPath converts records without building a *profile.Profile. One per
// Indexer: workers use it concurrently.
type fastPath struct {
	// decoders keeps decoders with their buffers between profiles.
	decoders sync.Pool
	// stacks maps the content hash of a stack's frames to its ID and frames
	// across profiles, so indices.StackID (sha256) runs once per new stack
	// rather than once per profile.
	stacks *stackCache
	// labels keeps label sets across profiles.
	labels *boundedMap[string, *labelSet]
	// limits are the general path's (record.DecodeProfile): a profile
	// beyond them is left to it, which says which limit.
	limits fastLimits
	// heavy, when set, is taken to convert a protobuf of checkAbove bytes
	// or more: the Indexer shares it with the general path, so that only
	// one large profile's tables (up to ~150 MiB within the limits) are
	// held at a time. Smaller ones, nearly all, are not held.
	heavy chan struct{}
}

// fastLimits is how the fast path stays within record.Limits without
// walking every profile twice: limits.Check cost about a third of a 19 Hz
// profile's conversion. A limit on a count of the whole profile (samples,
// labels, locations, lines, strings...) or on the decode heap cannot be
// passed by a protobuf shorter than checkAbove, since each element takes
// at least one or two bytes on the wire and at most maxHeapPerWireByte of
// heap (TestFastLimitsBound checks it with the costliest elements); such
// profiles are checked while the decoder walks them, for the limits on one
// element (sample types, stack depth, labels of a sample, string bytes,
// mappings, comments, one period type), and longer ones by Check first.
type fastLimits struct {
	record.Limits
	checkAbove int
}

// maxHeapPerWireByte bounds the decode heap per protobuf byte of any
// element record.Limits estimates (the costliest, a sample with one label,
// is about 200 bytes of heap per byte).
const maxHeapPerWireByte = 256

func newFastLimits(l record.Limits) fastLimits {
	n := min(2*l.MaxSamples, 2*l.MaxLabels, l.MaxSampleLocations, 2*l.MaxLocations,
		2*l.MaxFunctions, 2*l.MaxLines, 2*l.MaxStrings, int(l.MaxDecodeHeapBytes/maxHeapPerWireByte))
	return fastLimits{Limits: l, checkAbove: n}
}

// Bounds of the fast path's caches: entries, and about the bytes they hold
// (a hostile profile's stacks or label sets can be large).
const (
	stackCacheEntries = 1 << 14
	stackCacheBytes   = 64 << 20
	labelCacheEntries = 1 << 14
	labelCacheBytes   = 32 << 20
)

// check is record.Limits.Check for a protobuf of checkAbove bytes or more;
// shorter ones are checked as they are walked.
func (l *fastLimits) check(raw []byte) bool {
	return len(raw) < l.checkAbove || l.Check(raw) == nil
}

func newFastPath() *fastPath {
	return &fastPath{
		decoders: sync.Pool{New: func() any { return new(fastDecoder) }},
		stacks:   newStackCache(stackCacheEntries, stackCacheBytes),
		labels:   newBoundedMap[string, *labelSet](labelCacheEntries, labelCacheBytes),
		limits:   newFastLimits(record.DefaultLimits()),
	}
}

// convert turns a record value (gzip pprof) into the same Documents as
// DecodeProfile followed by Convert, without building a *profile.Profile: it
// walks the protobuf once, resolves each distinct stack and label set of the
// profile once, and takes the IDs of stacks seen in earlier profiles from
// f.stacks. It returns ok=false whenever the input has anything it does not
// handle exactly as the general path does (not gzip, malformed protobuf,
// numeric labels, repeated label keys, unknown or sparse IDs, bad values...):
// the caller then takes the general path, which also explains the error.
func (f *fastPath) convert(names indices.Names, meta record.Meta, part string, value []byte, fallback time.Time) (docs Documents, ok bool) {
	d := f.decoders.Get().(*fastDecoder)
	keep := false
	defer func() {
		// Not after a panic (the decoder's state is not to be trusted
		// again), nor after a large profile, whose tables would stay.
		if !keep {
			return
		}
		if d.raw.Cap() > 8<<20 {
			d.raw = bytes.Buffer{} // do not keep a rare huge profile's buffer
		}
		f.decoders.Put(d)
	}()
	if !d.decompress(value, f.limits.MaxDecompressedBytes) {
		keep = true
		return Documents{}, false
	}
	large := d.raw.Len() >= f.limits.checkAbove
	if large && f.heavy != nil {
		f.heavy <- struct{}{}
		defer func() { <-f.heavy }() // also when it panics
	}
	if f.limits.check(d.raw.Bytes()) && d.parse(&f.limits) {
		docs, ok = d.convert(names, meta, part, fallback, f, docBudget(d.raw.Len()))
	}
	keep = !large
	return docs, ok
}

// boundedMap is a goroutine-safe map that forgets everything when it holds
// max entries or about maxBytes: the fast path's caches across profiles,
// whose values never change once put.
type boundedMap[K comparable, V any] struct {
	max, maxBytes int
	mu            sync.RWMutex
	m             map[K]V
	bytes         int
}

func newBoundedMap[K comparable, V any](max, maxBytes int) *boundedMap[K, V] {
	return &boundedMap[K, V]{max: max, maxBytes: maxBytes, m: map[K]V{}}
}

func (c *boundedMap[K, V]) get(k K) (V, bool) {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	return v, ok
}

// put adds k, whose value holds about size bytes. A value larger than a
// quarter of the budget is not kept: it would flush the others.
func (c *boundedMap[K, V]) put(k K, v V, size int) {
	if size > c.maxBytes/4 {
		return
	}
	c.mu.Lock()
	if len(c.m) >= c.max || c.bytes+size > c.maxBytes {
		clear(c.m)
		c.bytes = 0
	}
	c.m[k] = v
	c.bytes += size
	c.mu.Unlock()
}

// stackCache maps a 128-bit content hash of a stack to its ID and frames.
type stackCache struct {
	seeds [2]maphash.Seed
	*boundedMap[[2]uint64, cachedStack]
}

type cachedStack struct {
	id     string
	prefix uint64          // idPrefix(id)
	frames []indices.Frame // shared, never modified
}

func newStackCache(max, maxBytes int) *stackCache {
	return &stackCache{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, boundedMap: newBoundedMap[[2]uint64, cachedStack](max, maxBytes)}
}

func (c *stackCache) hash(b []byte) [2]uint64 {
	return [2]uint64{maphash.Bytes(c.seeds[0], b), maphash.Bytes(c.seeds[1], b)}
}

// Decoded tables of one profile; string fields are string table indices.
type (
	fastMapping struct {
		id, file, build uint64
	}
	fastFunction struct {
		id, name, system, file uint64
	}
	fastLine struct {
		function, line uint64
	}
	fastLocation struct {
		id, mapping, address uint64
		lines                [2]int // range in fastDecoder.lines
		hashed               bool
		hash                 [2]uint64
	}
	fastValueType struct{ typ, unit uint64 }
)

// arenaKey is where a key is kept (in fastDecoder.keyArena) and what it
// stands for: a sample's location key its stack's index in the documents
// (-1 without frames), a sample's label fields its aggregate's index.
type arenaKey struct {
	off, n int
	val    int32
}

// hashSlots is an open-addressing table from a 64-bit hash to an index,
// for the lookups every sample (or new stack) makes. The hash is uniform
// already (maphash, or mixed), so a slot is its low bits; a Go map spent
// about three times as long per lookup. Equal hashes are the caller's to
// check against the key.
type hashSlots struct {
	slots []hashSlot
	n     int
}

type hashSlot struct {
	hash uint64
	at   int32 // index + 1; 0 is an empty slot
}

// reset empties t, sized for about hint entries (the previous profile's).
func (t *hashSlots) reset(hint int) {
	size := 64
	for size < 2*hint {
		size *= 2
	}
	if len(t.slots) != size && (len(t.slots) < size || len(t.slots) > 4*size) {
		t.slots = make([]hashSlot, size)
	} else {
		clear(t.slots)
	}
	t.n = 0
}

func (t *hashSlots) get(h uint64) (int32, bool) {
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s.at == 0 {
			return 0, false
		}
		if s.hash == h {
			return s.at - 1, true
		}
	}
}

// put adds h, which t does not have, at index at.
func (t *hashSlots) put(h uint64, at int32) {
	if 2*(t.n+1) > len(t.slots) {
		old := t.slots
		t.slots, t.n = make([]hashSlot, 2*len(old)), 0
		for _, s := range old {
			if s.at != 0 {
				t.put(s.hash, s.at-1)
			}
		}
	}
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].at != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = hashSlot{hash: h, at: at + 1}
	t.n++
}

// aggBuf is the scratch of one samples document, reused between profiles.
type aggBuf struct {
	// cells sums the document's values by stack index in the profile's
	// Documents.Stacks: a slice index on every sample instead of a map
	// lookup. Reset when the buffer is taken.
	cells []aggCell
	// ids and values are cells in stack ID order, for SetStacks.
	ids    []string
	values []int64
}

type aggCell struct {
	value int64
	seen  bool // the stack is in the document, even with value 0
}

// locField is a location_id field of a sample: one ID or a packed list.
type locField struct {
	typ  int
	u    uint64
	data []byte
}

// growZero extends s to n entries, the new ones zero.
func growZero[T any](s []T, n int) []T {
	if n <= len(s) {
		return s
	}
	if n <= cap(s) {
		t := s[:n]
		clear(t[len(s):])
		return t
	}
	t := make([]T, n, max(n, 2*cap(s)))
	copy(t, s)
	return t
}

// fastDecoder is the state of one profile's conversion, reused between
// profiles (its slices keep their capacity).
type fastDecoder struct {
	zr      *gzip.Reader
	br      bytes.Reader
	raw     bytes.Buffer
	strs    [][]byte // string table, slices of raw
	strVals []string // strs converted on first use
	strDone []bool

	sampleTypes []fastValueType
	samples     [][]byte
	mappings    []fastMapping
	locations   []fastLocation
	lines       []fastLine
	functions   []fastFunction
	mapByID     []int32 // ID -> index+1
	funcByID    []int32
	locByID     []int32

	timeNanos, defaultType int64
	checkStrs              []int64 // string indices pprof resolves (and so must be valid)
	limits                 *fastLimits

	ids    []uint64
	values []int64
	buf    []byte
	lkey   [][2]uint64 // a stack's location hashes

	aggBufs     []*aggBuf
	stackByLocs hashSlots // 64-bit hash of a location key -> index in locKeys
	locKeys     []arenaKey
	byRawLabels hashSlots // 64-bit hash of a sample's label fields -> index in labelKeys
	labelKeys   []arenaKey
	keyArena    []byte
	stackIndex  hashSlots // mixed idPrefix of a stack ID -> index in Documents.Stacks
	tableIDs    []uint64  // scratch of index
	stackPrefix []uint64  // idPrefix by index in Documents.Stacks
	packed      []byte    // a document's stack_values, until encoded
	byID        []int32   // stack indices in ID order
	sortKeys    []uint64  // scratch of sortStacks
	key         []byte
	labelBuf    []byte
	locFields   []locField
	// lastStacks is how many stacks the previous profile had: the next
	// one's Documents.Stacks starts with that capacity instead of growing
	// (and copying) a dozen times.
	lastStacks int

	// Scratch for pprofx.LocationFrames.
	loc  profile.Location
	mp   profile.Mapping
	fns  []profile.Function
	plns []profile.Line
}

func (d *fastDecoder) decompress(value []byte, limit int) bool {
	if len(value) < 2 || value[0] != 0x1f || value[1] != 0x8b {
		return false
	}
	d.raw.Reset()
	if out, ok := record.AppendStored(d.raw.AvailableBuffer(), value); ok {
		// Stored gzip, as the symbolizer writes: the blocks are copied, not
		// inflated (Write copies out onto itself unless append had to grow).
		d.raw.Write(out)
		return d.raw.Len() > 0
	}
	d.br.Reset(value)
	if d.zr == nil {
		zr, err := gzip.NewReader(&d.br)
		if err != nil {
			return false
		}
		d.zr = zr
	} else if err := d.zr.Reset(&d.br); err != nil {
		return false
	}
	if _, err := d.raw.ReadFrom(io.LimitReader(d.zr, int64(limit)+1)); err != nil {
		return false
	}
	return d.raw.Len() > 0 && d.raw.Len() <= limit
}

// varint decodes as pprof does: at most 10 bytes, extra high bits dropped.
func varint(b []byte) (uint64, int) {
	// Field keys, string and location indices, lengths: most varints of a
	// profile are one byte, and this test inlines where the loop does not.
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	return varintLong(b)
}

func varintLong(b []byte) (uint64, int) {
	var u uint64
	for i := 0; i < 10 && i < len(b); i++ {
		u |= uint64(b[i]&0x7f) << uint(7*i)
		if b[i]&0x80 == 0 {
			return u, i + 1
		}
	}
	return 0, 0
}

// field reads one protobuf field: its number, wire type, varint value or
// length-delimited bytes, and the rest. Other wire types give ok=false:
// every field pprof defines is a varint or bytes.
func field(b []byte) (num uint64, typ int, u uint64, data, rest []byte, ok bool) {
	key, n := varint(b)
	if n == 0 {
		return 0, 0, 0, nil, nil, false
	}
	b = b[n:]
	num, typ = key>>3, int(key&7)
	switch typ {
	case 0:
		u, n = varint(b)
		if n == 0 {
			return 0, 0, 0, nil, nil, false
		}
		return num, typ, u, nil, b[n:], true
	case 2:
		l, n := varint(b)
		if n == 0 || l > uint64(len(b)-n) {
			return 0, 0, 0, nil, nil, false
		}
		b = b[n:]
		return num, typ, 0, b[:l], b[l:], true
	}
	return 0, 0, 0, nil, nil, false
}

// appendVarints appends a repeated varint field (packed or not) to dst.
func appendVarints[T int64 | uint64](dst []T, typ int, u uint64, data []byte) ([]T, bool) {
	if typ == 0 {
		return append(dst, T(u)), true
	}
	for len(data) > 0 {
		v, n := varint(data)
		if n == 0 {
			return dst, false
		}
		dst = append(dst, T(v))
		data = data[n:]
	}
	return dst, true
}

// scalars reads a message whose fields are all varints numbered 1..len(dst),
// the last occurrence winning, as pprof does. It reads the two varints of a
// field itself rather than through field: functions, lines and labels are
// such messages, thousands per profile.
func scalars(b []byte, dst []*uint64) bool {
	for len(b) > 0 {
		key, n := varint(b)
		if n == 0 || key&7 != 0 || key>>3 == 0 || key>>3 > uint64(len(dst)) {
			return false
		}
		u, m := varint(b[n:])
		if m == 0 {
			return false
		}
		if p := dst[key>>3-1]; p != nil {
			*p = u
		}
		b = b[n+m:]
	}
	return true
}

// lenField reads a length-delimited field whose one-byte key is key.
func lenField(b []byte, key byte) (data, rest []byte, ok bool) {
	if len(b) < 2 || b[0] != key {
		return nil, nil, false
	}
	l, n := varint(b[1:])
	if n == 0 || l > uint64(len(b)-1-n) {
		return nil, nil, false
	}
	b = b[1+n:]
	return b[:l], b[l:], true
}

// usualSample reads a sample laid out as pprof's encoder writes it: one
// packed location_id field (more than two IDs), the values (packed, or one
// field each when at most two), then the label fields (maybe none). It
// appends the values to d.values; ok=false for anything else, which
// walkSample reads: this skips its per-field bookkeeping.
func (d *fastDecoder) usualSample(s []byte) (locs, labels []byte, ok bool) {
	if locs, s, ok = lenField(s, 1<<3|2); !ok {
		return nil, nil, false
	}
	if len(s) > 0 && s[0] == 2<<3|2 {
		var values []byte
		if values, s, ok = lenField(s, 2<<3|2); !ok {
			return nil, nil, false
		}
		if d.values, ok = appendVarints(d.values, 2, 0, values); !ok {
			return nil, nil, false
		}
	} else {
		for len(s) > 0 && s[0] == 2<<3 {
			u, n := varint(s[1:])
			if n == 0 {
				return nil, nil, false
			}
			d.values = append(d.values, int64(u))
			s = s[1+n:]
		}
	}
	labels = s[:len(s):len(s)] // never appended to
	for len(s) > 0 {
		if _, s, ok = lenField(s, 3<<3|2); !ok {
			return nil, nil, false
		}
	}
	return locs, labels, true
}

func (d *fastDecoder) reset() {
	d.strs = d.strs[:0]
	d.sampleTypes = d.sampleTypes[:0]
	d.samples = d.samples[:0]
	d.mappings = d.mappings[:0]
	d.locations = d.locations[:0]
	d.lines = d.lines[:0]
	d.functions = d.functions[:0]
	d.checkStrs = d.checkStrs[:0]
	d.timeNanos, d.defaultType = 0, 0
}

// parse walks the profile message, keeping samples as raw bytes for later,
// and checks the limits on one element of l.
func (d *fastDecoder) parse(l *fastLimits) bool {
	d.reset()
	d.limits = l
	b := d.raw.Bytes()
	timeSeen, periodSeen := false, false
	comments := 0
	for len(b) > 0 {
		var num, u uint64
		var typ int
		var data []byte
		if k := b[0]; k < 0x80 && k&7 == 2 {
			// A one-byte key of a length-delimited field: nearly every
			// field of a profile, read here as field would.
			l, n := varint(b[1:])
			if n == 0 || l > uint64(len(b)-1-n) {
				return false
			}
			num, typ, data, b = uint64(k>>3), 2, b[1+n:1+n+int(l)], b[1+n+int(l):]
		} else {
			var rest []byte
			var ok bool
			if num, typ, u, data, rest, ok = field(b); !ok {
				return false
			}
			b = rest
		}
		switch num {
		case 1, 11: // sample_type, period_type
			if typ != 2 {
				return false
			}
			var vt fastValueType
			if !scalars(data, []*uint64{&vt.typ, &vt.unit}) {
				return false
			}
			if num == 1 {
				d.sampleTypes = append(d.sampleTypes, vt)
				if len(d.sampleTypes) > l.MaxSampleTypes {
					return false
				}
			} else {
				if periodSeen {
					return false // pprof keeps the last; Limits refuses two
				}
				periodSeen = true
				d.checkStrs = append(d.checkStrs, int64(vt.typ), int64(vt.unit))
			}
		case 2:
			if typ != 2 {
				return false
			}
			d.samples = append(d.samples, data)
		case 3:
			if typ != 2 {
				return false
			}
			var m fastMapping
			var skip uint64
			if !scalars(data, []*uint64{&m.id, &skip, &skip, &skip, &m.file, &m.build, &skip, &skip, &skip, &skip}) {
				return false
			}
			d.mappings = append(d.mappings, m)
			if len(d.mappings) > l.MaxMappings {
				return false
			}
		case 4:
			if typ != 2 || !d.parseLocation(data) {
				return false
			}
		case 5:
			if typ != 2 {
				return false
			}
			var f fastFunction
			var skip uint64
			if !scalars(data, []*uint64{&f.id, &f.name, &f.system, &f.file, &skip}) {
				return false
			}
			d.functions = append(d.functions, f)
		case 6:
			if typ != 2 {
				return false
			}
			d.strs = append(d.strs, data)
			if len(d.strs[0]) != 0 || len(data) > l.MaxStringBytes {
				return false
			}
		case 7, 8, 10, 12, 15: // drop_frames, keep_frames, duration, period, doc_url
			if typ != 0 {
				return false
			}
			if num != 10 && num != 12 {
				d.checkStrs = append(d.checkStrs, int64(u))
			}
		case 9:
			if typ != 0 || (timeSeen && d.timeNanos != 0) {
				return false // pprof rejects concatenated profiles
			}
			timeSeen = true
			d.timeNanos = int64(u)
		case 13: // comments
			n := len(d.checkStrs)
			var ok bool
			if d.checkStrs, ok = appendVarints(d.checkStrs, typ, u, data); !ok || (typ != 0 && typ != 2) {
				return false
			}
			if comments += len(d.checkStrs) - n; comments > l.MaxComments {
				return false
			}
		case 14:
			if typ != 0 {
				return false
			}
			d.defaultType = int64(u)
		default:
			return false
		}
	}
	if len(d.strs) == 0 {
		return false
	}
	for _, i := range d.checkStrs {
		if !d.validStr(i) {
			return false
		}
	}
	for _, st := range d.sampleTypes {
		if !d.validStr(int64(st.typ)) || !d.validStr(int64(st.unit)) {
			return false
		}
	}
	for _, m := range d.mappings {
		if !d.validStr(int64(m.file)) || !d.validStr(int64(m.build)) {
			return false
		}
	}
	for _, f := range d.functions {
		if !d.validStr(int64(f.name)) || !d.validStr(int64(f.system)) || !d.validStr(int64(f.file)) {
			return false
		}
	}
	var ok bool
	// The IDs gathered into a slice first: index over a closure cost a
	// call per ID.
	d.tableIDs = d.tableIDs[:0]
	for _, m := range d.mappings {
		d.tableIDs = append(d.tableIDs, m.id)
	}
	if d.mapByID, ok = index(d.mapByID, d.tableIDs); !ok {
		return false
	}
	d.tableIDs = d.tableIDs[:0]
	for _, f := range d.functions {
		d.tableIDs = append(d.tableIDs, f.id)
	}
	if d.funcByID, ok = index(d.funcByID, d.tableIDs); !ok {
		return false
	}
	d.tableIDs = d.tableIDs[:0]
	for _, l := range d.locations {
		d.tableIDs = append(d.tableIDs, l.id)
	}
	if d.locByID, ok = index(d.locByID, d.tableIDs); !ok {
		return false
	}
	for i := range d.locations {
		l := &d.locations[i]
		if l.mapping != 0 && lookup(d.mapByID, l.mapping) < 0 {
			return false
		}
		// pprof's CheckValid (record.DecodeProfile) refuses a line
		// without a function, as one naming a function the table lacks.
		for _, ln := range d.lines[l.lines[0]:l.lines[1]] {
			if lookup(d.funcByID, ln.function) < 0 {
				return false
			}
		}
	}
	if cap(d.strVals) < len(d.strs) {
		d.strVals = make([]string, len(d.strs))
		d.strDone = make([]bool, len(d.strs))
	}
	d.strVals = d.strVals[:len(d.strs)]
	d.strDone = d.strDone[:len(d.strs)]
	clear(d.strVals)
	clear(d.strDone)
	return true
}

// parseLocation reads a location (as field and scalars would, inlined:
// a profile has thousands).
func (d *fastDecoder) parseLocation(b []byte) bool {
	l := fastLocation{lines: [2]int{len(d.lines), len(d.lines)}}
	for len(b) > 0 {
		key, n := varint(b)
		if n == 0 {
			return false
		}
		b = b[n:]
		num, typ := key>>3, key&7
		switch {
		case typ == 0 && (num >= 1 && num <= 3 || num == 5):
			u, m := varint(b)
			if m == 0 {
				return false
			}
			b = b[m:]
			switch num {
			case 1:
				l.id = u
			case 2:
				l.mapping = u
			case 3:
				l.address = u
			}
		case typ == 2 && num == 4:
			size, m := varint(b)
			if m == 0 || size > uint64(len(b)-m) {
				return false
			}
			data := b[m : m+int(size)]
			b = b[m+int(size):]
			var ln fastLine
			var skip uint64
			if !scalars(data, []*uint64{&ln.function, &ln.line, &skip}) {
				return false
			}
			d.lines = append(d.lines, ln)
		default:
			return false
		}
	}
	l.lines[1] = len(d.lines)
	d.locations = append(d.locations, l)
	return true
}

func (d *fastDecoder) validStr(i int64) bool { return i >= 0 && i < int64(len(d.strs)) }

func (d *fastDecoder) str(i uint64) string {
	if !d.strDone[i] {
		d.strVals[i] = string(d.strs[i])
		d.strDone[i] = true
	}
	return d.strVals[i]
}

// index maps the IDs of a table's entries to their index+1. IDs must be
// unique, non-zero and dense enough for a slice; anything else is left to
// the general path.
func index(dst []int32, ids []uint64) ([]int32, bool) {
	n := len(ids)
	size := 0
	for _, x := range ids {
		if x == 0 || x > uint64(4*n+64) {
			return dst, false
		}
		size = max(size, int(x)+1)
	}
	if cap(dst) < size {
		dst = make([]int32, size)
	}
	dst = dst[:size]
	clear(dst)
	for i, x := range ids {
		if dst[x] != 0 {
			return dst, false
		}
		dst[x] = int32(i + 1)
	}
	return dst, true
}

// lookup is the index of id in a table built by index, or -1.
func lookup(t []int32, id uint64) int {
	if id >= uint64(len(t)) {
		return -1
	}
	return int(t[id]) - 1
}

// locationHash is a content hash of everything a location's frames depend
// on (binary file, address, lines' function names, files and numbers), so
// equal hashes mean equal frames.
func (d *fastDecoder) locationHash(l *fastLocation, c *stackCache) [2]uint64 {
	if l.hashed {
		return l.hash
	}
	b := d.buf[:0]
	if l.mapping != 0 {
		b = appendBytes(b, d.strs[d.mappings[lookup(d.mapByID, l.mapping)].file])
	} else {
		b = appendBytes(b, nil)
	}
	b = binary.LittleEndian.AppendUint64(b, l.address)
	b = binary.LittleEndian.AppendUint64(b, uint64(l.lines[1]-l.lines[0]))
	for _, ln := range d.lines[l.lines[0]:l.lines[1]] {
		if ln.function != 0 {
			f := d.functions[lookup(d.funcByID, ln.function)]
			b = appendBytes(b, d.strs[f.name])
			b = appendBytes(b, d.strs[f.file])
		} else {
			b = appendBytes(b, nil)
			b = appendBytes(b, nil)
		}
		b = binary.LittleEndian.AppendUint64(b, ln.line)
	}
	d.buf = b
	l.hash, l.hashed = c.hash(b), true
	return l.hash
}

func appendBytes(b, s []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// locationFrames are the frames of a location by pprofx's rule, given a
// scratch profile.Location that mirrors it.
func (d *fastDecoder) locationFrames(dst []indices.Frame, l *fastLocation) []indices.Frame {
	d.loc = profile.Location{Address: l.address}
	if l.mapping != 0 {
		d.mp = profile.Mapping{File: d.str(d.mappings[lookup(d.mapByID, l.mapping)].file)}
		d.loc.Mapping = &d.mp
	}
	n := l.lines[1] - l.lines[0]
	if cap(d.plns) < n {
		d.plns = make([]profile.Line, n)
		d.fns = make([]profile.Function, n)
	}
	d.plns, d.fns = d.plns[:n], d.fns[:n]
	for i, ln := range d.lines[l.lines[0]:l.lines[1]] {
		d.plns[i] = profile.Line{Line: int64(ln.line)}
		if ln.function != 0 {
			f := d.functions[lookup(d.funcByID, ln.function)]
			d.fns[i] = profile.Function{Name: d.str(f.name), Filename: d.str(f.file)}
			d.plns[i].Function = &d.fns[i]
		}
	}
	d.loc.Line = d.plns
	return pprofx.LocationFrames(dst, &d.loc)
}

// stack resolves the location IDs of a sample (d.ids) to a stack ID, adding
// the stack to docs the first time the profile has it.
func (d *fastDecoder) stack(c *stackCache) (cachedStack, bool) {
	hs := d.lkey[:0]
	for _, id := range d.ids {
		i := lookup(d.locByID, id)
		if i < 0 {
			return cachedStack{}, false
		}
		hs = append(hs, d.locationHash(&d.locations[i], c))
	}
	d.lkey = hs
	if len(d.ids) == 0 {
		return cachedStack{}, true
	}
	// The location hashes' memory is the key: it is only compared within
	// this process, so its byte order does not matter, and no bytes are
	// copied.
	h := c.hash(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(hs))), 16*len(hs)))
	if s, ok := c.get(h); ok {
		return s, true
	}
	frames := make([]indices.Frame, 0, len(d.ids))
	for _, id := range d.ids {
		frames = d.locationFrames(frames, &d.locations[lookup(d.locByID, id)])
	}
	s := cachedStack{frames: frames}
	size := 64
	if len(frames) > 0 {
		s.id = indices.StackID(frames)
		s.prefix = idPrefix(s.id)
		for _, f := range frames {
			size += 64 + len(f.Function) + len(f.File) + len(f.Binary)
		}
	}
	c.put(h, s, size)
	return s, true
}

// labels decodes the label submessages of a sample as pprof's Label map.
// Numeric labels, repeated keys and more labels than the limit are left to
// the general path.
func (d *fastDecoder) labels(raw []byte) (map[string][]string, bool) {
	var out map[string][]string
	for n := 0; len(raw) > 0; n++ {
		if n == d.limits.MaxLabelsPerSample {
			return nil, false
		}
		_, _, _, data, rest, _ := field(raw) // validated by the caller
		raw = rest
		var key, str, num, unit uint64
		if !scalars(data, []*uint64{&key, &str, &num, &unit}) || !d.validStr(int64(key)) {
			return nil, false
		}
		if str == 0 {
			if num != 0 || unit != 0 {
				return nil, false
			}
			continue // pprof drops a label without value
		}
		if !d.validStr(int64(str)) {
			return nil, false
		}
		k := d.str(key)
		if _, dup := out[k]; dup {
			return nil, false
		}
		if out == nil {
			out = map[string][]string{}
		}
		out[k] = []string{d.str(str)}
	}
	return out, true
}

// convert is Convert over the decoded tables; see Convert for the rules.
func (d *fastDecoder) convert(names indices.Names, meta record.Meta, part string, fallback time.Time, f *fastPath, budget int) (Documents, bool) {
	c := f.stacks
	if len(d.sampleTypes) == 0 {
		return Documents{}, false
	}
	types := make([]*profile.ValueType, len(d.sampleTypes))
	for i, st := range d.sampleTypes {
		types[i] = &profile.ValueType{Type: d.str(st.typ), Unit: d.str(st.unit)}
	}
	if !d.validStr(d.defaultType) {
		return Documents{}, false
	}
	h := newHeader(names, meta, part, &profile.Profile{SampleType: types, DefaultSampleType: d.str(uint64(d.defaultType)), TimeNanos: d.timeNanos}, fallback)
	valueIdx, countIdx, at := h.valueIdx, h.countIdx, h.at

	type agg struct {
		doc indices.SampleDoc
		raw int64
		ls  *labelSet
		at  int32 // index in order
		*aggBuf
	}
	sets := labelSets{shared: f.labels}
	merged := map[string]*agg{}
	var order []*agg
	docs := Documents{At: at}
	// Per profile: a sample's stack (by the hash of its location key) as an
	// index in docs.Stacks, -1 without frames; aggregates by the raw label
	// fields; stacks by the first 8 bytes of their ID (checked against the
	// whole ID: a 64-bit integer hashes faster than a string).
	d.stackByLocs.reset(len(d.locKeys))
	d.byRawLabels.reset(len(d.labelKeys))
	d.locKeys, d.labelKeys, d.keyArena = d.locKeys[:0], d.labelKeys[:0], d.keyArena[:0]
	d.stackIndex.reset(d.lastStacks)
	d.stackPrefix = d.stackPrefix[:0]
	keyBuf, locFields := d.key[:0], d.locFields[:0]
	defer func() { d.key, d.locFields = keyBuf, locFields }()
	for _, s := range d.samples {
		d.values = d.values[:0]
		locFields = locFields[:0]
		// usual: the sample's location IDs are locs, packed, rather than
		// in locFields (a local slice, not a store into the heap: the
		// write barriers cost more than the rest of the sample).
		var labelKey, locs []byte
		var usual bool
		if locs, labelKey, usual = d.usualSample(s); !usual {
			var ok bool
			d.values = d.values[:0] // walked again from the start
			if labelKey, ok = d.walkSample(s, &locFields); !ok {
				return Documents{}, false
			}
		}
		// One value per sample type, as pprof's CheckValid requires.
		if len(d.values) != len(d.sampleTypes) {
			return Documents{}, false
		}
		v := d.values[valueIdx]
		if v < 0 {
			return Documents{}, false
		}
		// The key of a sample's stack: the packed location IDs as they are
		// (one field, the usual case) or re-encoded; IDs are decoded, and
		// so validated, when the key is new.
		//
		// Both forms can share one table: the re-encoded form is the IDs as
		// uvarints, which is what packed IDs are, so equal bytes are equal
		// IDs whichever form they came in (and the packed bytes are not
		// copied).
		var key []byte
		if usual {
			key = locs // never appended to
		} else if len(locFields) == 1 && locFields[0].typ == 2 {
			key = locFields[0].data
		} else {
			keyBuf = keyBuf[:0]
			for _, f := range locFields {
				var ok bool
				if d.ids, ok = appendVarints(d.ids[:0], f.typ, f.u, f.data); !ok {
					return Documents{}, false
				}
				for _, id := range d.ids {
					keyBuf = binary.AppendUvarint(keyBuf, id)
				}
			}
			key = keyBuf
		}
		lh := maphash.Bytes(c.seeds[0], key)
		var si int32
		ki, ok := d.stackByLocs.get(lh)
		if ok {
			k := d.locKeys[ki]
			if !bytes.Equal(d.keyArena[k.off:k.off+k.n], key) {
				return Documents{}, false // a 64-bit collision: left to the general path
			}
			si = k.val
		} else {
			d.ids = d.ids[:0]
			if usual {
				if d.ids, ok = appendVarints(d.ids, 2, 0, locs); !ok {
					return Documents{}, false
				}
			}
			for _, f := range locFields {
				if d.ids, ok = appendVarints(d.ids, f.typ, f.u, f.data); !ok {
					return Documents{}, false
				}
			}
			if len(d.ids) > d.limits.MaxLocationsPerSample {
				return Documents{}, false
			}
			st, ok := d.stack(c)
			if !ok {
				return Documents{}, false
			}
			si = -1
			if st.id != "" {
				// The prefix mixed so that its low bits, which pick the
				// slot, depend on all of it (a bijection: equal hashes
				// are equal prefixes).
				ph := st.prefix * 0x9e3779b97f4a7c15
				ph ^= ph >> 29
				if si, ok = d.stackIndex.get(ph); !ok {
					si = int32(len(docs.Stacks))
					d.stackIndex.put(ph, si)
					if docs.Stacks == nil { // nil without stacks, as Convert's
						// Room for a bit more than the previous profile
						// had: growing copies the slice.
						docs.Stacks = make([]Stack, 0, max(d.lastStacks+d.lastStacks/4, 16))
					}
					docs.Stacks = append(docs.Stacks, Stack{ID: st.id, Frames: st.frames, At: at})
					d.stackPrefix = append(d.stackPrefix, st.prefix)
				} else if docs.Stacks[si].ID != st.id {
					return Documents{}, false // two IDs starting alike: left to the general path
				}
			}
			d.stackByLocs.put(lh, int32(len(d.locKeys)))
			d.locKeys = append(d.locKeys, arenaKey{off: len(d.keyArena), n: len(key), val: si})
			d.keyArena = append(d.keyArena, key...)
		}
		var a *agg
		lbh := maphash.Bytes(c.seeds[0], labelKey)
		if li, ok := d.byRawLabels.get(lbh); ok {
			k := d.labelKeys[li]
			if !bytes.Equal(d.keyArena[k.off:k.off+k.n], labelKey) {
				return Documents{}, false // a 64-bit collision: left to the general path
			}
			a = order[k.val]
		} else {
			raw, ok := d.labels(labelKey)
			if !ok {
				return Documents{}, false
			}
			ls := sets.get(raw, meta.Host)
			if ls.err != nil || sets.bytes > budget {
				return Documents{}, false // the general path explains it
			}
			a = merged[ls.key]
			if a == nil {
				a = &agg{doc: ls.doc(at, meta.Type), ls: ls}
				// Scratch reused between profiles: SetStacks copies ids
				// and values.
				k := len(order)
				if k == len(d.aggBufs) {
					d.aggBufs = append(d.aggBufs, new(aggBuf))
				}
				ab := d.aggBufs[k]
				clear(ab.cells)
				ab.cells = ab.cells[:0]
				a.aggBuf, a.at = ab, int32(k)
				merged[ls.key] = a
				order = append(order, a)
				docs.Labels.add(ls.drops)
			}
			d.byRawLabels.put(lbh, int32(len(d.labelKeys)))
			d.labelKeys = append(d.labelKeys, arenaKey{off: len(d.keyArena), n: len(labelKey), val: a.at})
			d.keyArena = append(d.keyArena, labelKey...)
		}
		raw := int64(1)
		if countIdx >= 0 && countIdx < len(d.values) {
			raw = d.values[countIdx]
		}
		a.doc.Value += v
		a.doc.Count += raw
		a.raw += raw
		if si < 0 {
			continue
		}
		if int(si) >= len(a.cells) {
			// To the stacks' capacity at once: a document meets new stacks
			// all along the profile.
			a.cells = growZero(a.cells, cap(docs.Stacks))
		}
		a.cells[si].value += v
		a.cells[si].seen = true
	}
	d.lastStacks = len(docs.Stacks)
	byID := d.sortStacks(docs.Stacks)
	docs.Samples = make([]Sample, 0, len(order))
	size := 0
	for _, a := range order {
		a.ids, a.values = a.ids[:0], a.values[:0]
		for _, at := range byID {
			if int(at) < len(a.cells) && a.cells[at].seen {
				a.ids = append(a.ids, docs.Stacks[at].ID)
				a.values = append(a.values, a.cells[at].value)
			}
		}
		// What SetStacks would do, without its copies: the IDs are sorted
		// and unique by construction and the document is encoded right
		// away. Sums can still overflow to negative values, which
		// PackStackValues refuses as SetStacks would.
		if len(a.ids) > 0 {
			packed, err := indices.PackStackValues(d.packed[:0], a.values)
			if err != nil {
				return Documents{}, false
			}
			d.packed = packed
			a.doc.StackIDs, a.doc.StackValues = a.ids, packed
		}
		sample := h.encode(&a.doc, a.ls, a.raw)
		clear(a.ids) // do not keep the IDs alive in the pool
		if size += len(sample.Doc); size > budget {
			return Documents{}, false
		}
		docs.Samples = append(docs.Samples, sample)
	}
	return docs, true
}

// walkSample reads a sample field by field, whatever its layout: the
// location_id fields into locFields, the values into d.values. labelKey is
// the label fields as they are when together (the usual case), else copied
// together into d.labelBuf (a second walk, rare); never appended to.
func (d *fastDecoder) walkSample(s []byte, locFields *[]locField) (labelKey []byte, ok bool) {
	full := s
	labelStart, labelEnd, labelsApart := -1, -1, false
	for len(s) > 0 {
		start := len(full) - len(s)
		num, typ, u, data, rest, ok := field(s)
		if !ok {
			return nil, false
		}
		s = rest
		if labelStart >= 0 && num != 3 {
			labelsApart = true
		}
		switch num {
		case 1:
			*locFields = append(*locFields, locField{typ, u, data})
		case 2:
			if d.values, ok = appendVarints(d.values, typ, u, data); !ok {
				return nil, false
			}
		case 3:
			if typ != 2 {
				return nil, false
			}
			if labelStart < 0 {
				labelStart = start
			}
			labelEnd = len(full) - len(s)
		default:
			return nil, false
		}
	}
	if labelStart >= 0 {
		labelKey = full[labelStart:labelEnd:labelEnd]
	}
	if labelsApart {
		d.labelBuf = d.labelBuf[:0]
		for r := full; len(r) > 0; {
			num, _, _, data, rest, _ := field(r) // walked above
			r = rest
			if num == 3 {
				d.labelBuf = binary.AppendUvarint(d.labelBuf, 3<<3|2)
				d.labelBuf = binary.AppendUvarint(d.labelBuf, uint64(len(data)))
				d.labelBuf = append(d.labelBuf, data...)
			}
		}
		labelKey = d.labelBuf
	}
	return labelKey, true
}

// idPrefix is the first 8 bytes of a stack ID, big-endian (zero-padded):
// integers ordered as the IDs are, unless equal.
func idPrefix(id string) uint64 {
	var b [8]byte
	copy(b[:], id)
	return binary.BigEndian.Uint64(b[:])
}

// sortStacks returns the indices of stacks in ID order (d.stackPrefix holds
// their idPrefix). Each document then lists its stacks already sorted by
// walking this order, and SetStacks finds them sorted: one sort per profile
// instead of one per document. The sort is of plain integers, the first 6
// bytes of an ID above a 16-bit index (a comparison function cost as much
// as the rest of a document); IDs equal in those bytes, rare for hashes,
// are then ordered by the whole ID.
func (d *fastDecoder) sortStacks(stacks []Stack) []int32 {
	byID := d.byID[:0]
	defer func() { d.byID = byID }()
	if len(stacks) > 1<<16 {
		for i := range stacks {
			byID = append(byID, int32(i))
		}
		slices.SortFunc(byID, func(x, y int32) int { return strings.Compare(stacks[x].ID, stacks[y].ID) })
		return byID
	}
	keys := d.sortKeys[:0]
	for i, p := range d.stackPrefix {
		keys = append(keys, p&^0xffff|uint64(i))
	}
	slices.Sort(keys)
	d.sortKeys = keys
	for _, k := range keys {
		byID = append(byID, int32(k&0xffff))
	}
	for i := 1; i < len(keys); i++ {
		if keys[i]>>16 != keys[i-1]>>16 {
			continue
		}
		j := i + 1
		for j < len(keys) && keys[j]>>16 == keys[i]>>16 {
			j++
		}
		group := byID[i-1 : j]
		slices.SortFunc(group, func(x, y int32) int { return strings.Compare(stacks[x].ID, stacks[y].ID) })
		i = j - 1
	}
	return byID
}

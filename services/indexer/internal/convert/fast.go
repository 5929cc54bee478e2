package convert

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/cache"
	"github.com/stackstream/stackstream/pkg/pprofwire"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// fastPath converts records without building a *profile.Profile. One per
// Converter: workers use it concurrently.
type fastPath struct {
	// decoders keeps decoders with their buffers between profiles.
	decoders sync.Pool
	// stacks maps the content hash of a stack's frames to its ID across
	// profiles, so indices.StackID (sha256) runs once per new stack rather
	// than once per profile, and the frames are built only for stacks
	// whose document is to be written.
	stacks *stackCache
	// labels keeps label sets across profiles.
	labels *cache.Bounded[string, *labelSet]
	// limits are the general path's: a profile beyond them is left to it,
	// which says which limit.
	limits fastLimits
	// heavy, when set, is taken to convert a protobuf of checkAbove bytes
	// or more: the Converter shares it with the general path, so that only
	// Limits.Heavy large profiles' tables (up to ~150 MiB each within the
	// limits) are held at a time. Smaller ones, nearly all, are not held.
	heavy chan struct{}
}

// fastLimits is how the fast path stays within record.Limits without
// walking every profile twice: limits.Check cost about a third of a 19 Hz
// profile's conversion. A limit on a count of the whole profile (samples,
// labels, locations, lines, strings...) or on the decode heap cannot be
// passed by a protobuf shorter than checkAbove (pprofwire.CheckAbove:
// each element takes at least one or two bytes on the wire and a bounded
// heap; TestCheckAbove checks it with the costliest elements); such
// profiles are checked while the decoder walks them, for the limits on one
// element (sample types, stack depth, labels of a sample, string bytes,
// mappings, comments, one period type), and longer ones by Check first.
type fastLimits struct {
	record.Limits
	checkAbove int
}

func newFastLimits(l record.Limits) fastLimits {
	return fastLimits{Limits: l, checkAbove: pprofwire.CheckAbove(l)}
}

// Bounds of the fast path's caches: entries, and about the bytes they hold
// (a hostile profile's stacks or label sets can be large).
const (
	// Stack IDs only (32 bytes an entry, about 10 MiB when full): a
	// loadgen fleet of 200 hosts has 68,536 distinct stacks in 3 simulated
	// minutes, and a cache smaller than the working set turns over and
	// over (docs/INDEXER.md, "Stack IDs without frames"). When it held the
	// frames too it was 16,384 entries: larger, the garbage collector's
	// work on its frames cost more than the IDs it saved.
	stackCacheEntries = 1 << 18
	labelCacheEntries = 1 << 14
	labelCacheBytes   = 32 << 20
)

func newFastPath(l record.Limits) *fastPath {
	return &fastPath{
		decoders: sync.Pool{New: func() any { return new(fastDecoder) }},
		stacks:   newStackCache(stackCacheEntries),
		labels:   cache.New[string, *labelSet](labelCacheEntries, labelCacheBytes),
		limits:   newFastLimits(l),
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
func (f *fastPath) convert(names indices.Names, meta record.Meta, part string, value []byte, fallback time.Time, known Known) (docs Documents, ok bool) {
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
	if d.parse(&f.limits) {
		docs, ok = d.convert(names, meta, part, fallback, f, known, docBudget(d.raw.Len()))
	}
	keep = !large
	return docs, ok
}

// convert is Convert over the decoded tables; see Convert for the rules.
func (d *fastDecoder) convert(names indices.Names, meta record.Meta, part string, fallback time.Time, f *fastPath, known Known, budget int) (Documents, bool) {
	c := f.stacks
	if len(d.SampleTypes) == 0 {
		return Documents{}, false
	}
	types := make([]*profile.ValueType, len(d.SampleTypes))
	for i, st := range d.SampleTypes {
		types[i] = &profile.ValueType{Type: d.String(st.Type), Unit: d.String(st.Unit)}
	}
	h := newHeader(names, meta, part, &profile.Profile{SampleType: types, DefaultSampleType: d.String(d.DefaultSampleType), TimeNanos: d.TimeNanos}, fallback)
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
	for _, s := range d.Samples {
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
		if len(d.values) != len(d.SampleTypes) {
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
				if d.ids, ok = pprofwire.AppendVarints(d.ids[:0], f.typ, f.u, f.data); !ok {
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
				if d.ids, ok = pprofwire.AppendVarints(d.ids, 2, 0, locs); !ok {
					return Documents{}, false
				}
			}
			for _, f := range locFields {
				if d.ids, ok = pprofwire.AppendVarints(d.ids, f.typ, f.u, f.data); !ok {
					return Documents{}, false
				}
			}
			if len(d.ids) > d.limits.MaxLocationsPerSample {
				return Documents{}, false
			}
			st, ok := d.stack(c, known, at)
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
					docs.Stacks = append(docs.Stacks, Stack{ID: st.id, Frames: st.frames, At: at, Known: st.known})
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

// stack resolves the location IDs of a sample (d.ids) to a stack ID, and
// to its frames unless known reports the stack stored for at's day.
func (d *fastDecoder) stack(c *stackCache, known Known, at time.Time) (cachedStack, bool) {
	hs := d.lkey[:0]
	for _, id := range d.ids {
		i := d.LocationIndex(id)
		if i < 0 {
			return cachedStack{}, false
		}
		hs = append(hs, d.locationHash(i, c))
	}
	d.lkey = hs
	if len(d.ids) == 0 {
		return cachedStack{}, true
	}
	// The location hashes' memory is the key: it is only compared within
	// this process, so its byte order does not matter, and no bytes are
	// copied.
	h := c.hash(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(hs))), 16*len(hs)))
	if id, ok := c.Get(h); ok {
		s := cachedStack{id: string(id[:])}
		s.prefix = idPrefix(s.id)
		if known != nil && known(s.id, at) {
			s.known = true
		} else {
			s.frames = d.stackFrames()
		}
		return s, true
	}
	s := cachedStack{frames: d.stackFrames()}
	if len(s.frames) > 0 {
		s.id = indices.StackID(s.frames)
		s.prefix = idPrefix(s.id)
		var id stackID
		if copy(id[:], s.id) == len(s.id) {
			c.Put(h, id, 0)
		}
	}
	return s, true
}

// stackFrames are the frames of the sample's locations (d.ids, all found).
func (d *fastDecoder) stackFrames() []indices.Frame {
	frames := make([]indices.Frame, 0, len(d.ids))
	for _, id := range d.ids {
		frames = d.frames.Append(frames, &d.Tables, &d.Locations[d.LocationIndex(id)])
	}
	return frames
}

// locationHash is a content hash of everything a location's frames depend
// on (binary file, address, lines' function names, files and numbers), so
// equal hashes mean equal frames.
func (d *fastDecoder) locationHash(i int, c *stackCache) [2]uint64 {
	if d.locHashed[i] {
		return d.locHashes[i]
	}
	l := &d.Locations[i]
	b := d.buf[:0]
	if l.Mapping != 0 {
		b = appendBytes(b, d.Strings[d.Mappings[d.MappingIndex(l.Mapping)].File])
	} else {
		b = appendBytes(b, nil)
	}
	lines := d.LocationLines(l)
	b = binary.LittleEndian.AppendUint64(b, l.Address)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(lines)))
	for _, ln := range lines {
		f := &d.Functions[d.FunctionIndex(ln.Function)] // pprofwire.Tables.Read resolved it
		b = appendBytes(b, d.Strings[f.Name])
		b = appendBytes(b, d.Strings[f.Filename])
		b = binary.LittleEndian.AppendUint64(b, ln.Line)
	}
	d.buf = b
	d.locHashes[i], d.locHashed[i] = c.hash(b), true
	return d.locHashes[i]
}

func appendBytes(b, s []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
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

// arenaKey is where a key is kept (in fastDecoder.keyArena) and what it
// stands for: a sample's location key its stack's index in the documents
// (-1 without frames), a sample's label fields its aggregate's index.
type arenaKey struct {
	off, n int
	val    int32
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

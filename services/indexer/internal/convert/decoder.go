package convert

import (
	"bytes"
	"encoding/binary"
	"io"
	"slices"

	"github.com/klauspost/compress/gzip"

	"github.com/stackstream/stackstream/pkg/pprofwire"
	"github.com/stackstream/stackstream/schemas/record"
)

// locField is a location_id field of a sample: one ID or a packed list.
type locField struct {
	typ  int
	u    uint64
	data []byte
}

// fastDecoder is the state of one profile's conversion, reused between
// profiles (its slices keep their capacity).
type fastDecoder struct {
	zr  *gzip.Reader
	br  bytes.Reader
	raw bytes.Buffer
	pprofwire.Tables
	// locHashes are the content hashes of Locations (locationHash),
	// computed on first use.
	locHashes [][2]uint64
	locHashed []bool
	sample    pprofwire.Sample // walkSample's
	walkIDs   []byte           // walkSample's location IDs, as uvarints
	limits    *fastLimits

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

	frames pprofwire.Frames
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

// parse reads d.raw within l (pprofwire.Tables.Read), keeping samples as
// raw bytes for later; ok=false also for sparse IDs, which the fast path
// leaves to the general one.
func (d *fastDecoder) parse(l *fastLimits) bool {
	d.limits = l
	if d.Read(d.raw.Bytes(), &l.Limits, nil) != nil || !d.DenseIDs() {
		return false
	}
	d.locHashes = slices.Grow(d.locHashes[:0], len(d.Locations))[:len(d.Locations)]
	d.locHashed = slices.Grow(d.locHashed[:0], len(d.Locations))[:len(d.Locations)]
	clear(d.locHashed)
	return true
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
		if d.values, ok = pprofwire.AppendVarints(d.values, 2, 0, values); !ok {
			return nil, nil, false
		}
	} else {
		for len(s) > 0 && s[0] == 2<<3 {
			u, n := pprofwire.Varint(s[1:])
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

// walkSample reads a sample whatever its layout (pprofwire's
// Tables.ReadSample): its location IDs into locFields, as one packed field,
// its values into d.values. labelKey is the label fields as
// Sample.Labels has them; never appended to.
func (d *fastDecoder) walkSample(s []byte, locFields *[]locField) (labelKey []byte, ok bool) {
	if !d.ReadSample(s, &d.sample) {
		return nil, false
	}
	d.values = append(d.values, d.sample.Values...)
	d.walkIDs = d.walkIDs[:0]
	for _, id := range d.sample.LocationIDs {
		d.walkIDs = binary.AppendUvarint(d.walkIDs, id)
	}
	*locFields = append(*locFields, locField{typ: 2, data: d.walkIDs})
	return d.sample.Labels, true
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
		l, rest, ok := pprofwire.NextLabel(raw)
		if !ok || !d.ValidString(l.Key) {
			return nil, false
		}
		raw = rest
		if l.Str == 0 {
			if l.Num != 0 || l.NumUnit != 0 {
				return nil, false
			}
			continue // pprof drops a label without value
		}
		if !d.ValidString(l.Str) {
			return nil, false
		}
		k := d.String(l.Key)
		if _, dup := out[k]; dup {
			return nil, false
		}
		if out == nil {
			out = map[string][]string{}
		}
		out[k] = []string{d.String(l.Str)}
	}
	return out, true
}

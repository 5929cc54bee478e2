package convert

import (
	"hash/maphash"

	"github.com/stackstream/stackstream/pkg/cache"
	"github.com/stackstream/stackstream/schemas/indices"
)

// stackCache maps a 128-bit content hash of a stack to its ID. It holds
// the IDs alone, no frames: an entry is 32 bytes without pointers, so the
// cache can hold a fleet's working set of stacks without adding to what the
// garbage collector scans, and the frames are built only for a stack whose
// document is to be written (Known).
type stackCache struct {
	seeds [2]maphash.Seed
	*cache.Bounded[[2]uint64, stackID]
}

// stackID is a stack ID (indices.StackID: always 16 bytes) held inline.
type stackID [16]byte

// cachedStack is a stack of a profile as stack resolves it.
type cachedStack struct {
	id     string
	prefix uint64          // idPrefix(id)
	frames []indices.Frame // nil when known
	known  bool            // Known said its document is not to be written
}

func newStackCache(max int) *stackCache {
	return &stackCache{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, Bounded: cache.New[[2]uint64, stackID](max, 0)}
}

func (c *stackCache) hash(b []byte) [2]uint64 {
	return [2]uint64{maphash.Bytes(c.seeds[0], b), maphash.Bytes(c.seeds[1], b)}
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

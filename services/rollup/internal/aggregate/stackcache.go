package aggregate

import (
	"crypto/sha256"
	"hash"
	"slices"

	"github.com/stackstream/stackstream/schemas/indices"
)

// stackCache holds the IDs and frames of the stacks seen, by a 128-bit
// hash of their frames or locations (Partition.stack, wireStack), for
// every partition sharing a Budget: one cache per instance, so a stack
// that hosts of several partitions run is held once. Its bytes are charged
// to the Budget like the window state, and it gives way to the state: when
// folding a profile in would pass the Budget, cached stacks are dropped
// first, those unused the longest first (giveWay), and a stack that would
// pass it is not cached. Until 2026-12-01 each partition had a cache of
// its own, up to 32 MiB, outside the Budget: in the 50-host soak the six
// caches were the largest user of the rollup's heap (docs/ROLLUP.md).
type stackCache struct {
	m map[[2]uint64]*stackInfo
	n int // stacks held
	// gen counts the calls of giveWay that dropped stacks without a
	// reset: a stack found is marked with it (stackInfo.used), so that
	// its age, in generations, is how many gave way since it was last
	// found.
	gen uint32
	// table numbers the frames of the stacks built, and locs keeps the
	// frames of their locations (a Wire's, by Wire.locationHash), so that
	// a stack seen for the first time whose locations were seen in other
	// stacks (most: its callers are) is not named frame by frame again.
	// Naming and hashing a new stack's frames was a sixth of the rollup's
	// CPU in the pipeline bench's part A until 2026-12-02. Both are
	// dropped with the whole cache (reset), not with the stacks given
	// way: the locations hold table IDs.
	table      *frameTable
	locs       map[[2]uint64]*locFrames
	tableBytes int64 // frameCost of the table's frames, locBytes of locs
	// The stack being built (begin, extend, end): its frame IDs, its
	// text (past maxStackTextBytes, hashed as it comes in sha) and its
	// trie bound.
	ids   []int32
	text  []byte
	sha   hash.Hash
	long  bool
	bound int64
	// bytes: stackBytes of the stacks held and tableBytes, charged to
	// budget, at most maxBytes.
	bytes    int64
	maxBytes int64
	budget   *Budget
	// stats counts what the cache did since it was made (CacheStats).
	stats CacheStats
}

// CacheStats are counts of a stack cache's work since it was made: how
// often a stack had to be built (named and hashed) because the cache did
// not hold it, how often the cache gave way to the state, and how many of
// those dropped the whole cache, frame table and locations included. The
// rollup exports them as counters: a run whose builds keep pace with its
// profiles' stacks, and whose resets grow, has a state budget too small
// for its fleet (docs/ROLLUP.md).
type CacheStats struct {
	Built, GaveWay, Resets int64
}

// maxCachedStacks and the Budget's CacheMaxBytes (DefaultStackCacheBytes
// unless set) bound the stack cache: a stack holds a frame per line of its
// locations, and each frame's names can be long (up to record.Limits'
// MaxStringBytes).
const (
	maxCachedStacks        = 1 << 18
	DefaultStackCacheBytes = 64 << 20
)

func newStackCache(b *Budget) *stackCache {
	c := &stackCache{budget: b, maxBytes: DefaultStackCacheBytes}
	if b != nil && b.CacheMaxBytes > 0 {
		c.maxBytes = b.CacheMaxBytes
	}
	c.reset()
	return c
}

// get returns the stack cached under key, else nil, marked used now.
func (c *stackCache) get(key [2]uint64) *stackInfo {
	st := c.m[key]
	if st != nil {
		st.used = c.gen
	}
	return st
}

// locFrames are the frames of a location (or of a whole stack), leaf
// first: as table IDs, as the text their stack ID hashes
// (indices.AppendStackText), and the trie bound they add.
type locFrames struct {
	ids   []int32
	text  []byte
	bound int64
}

// locBytes is an upper bound of what keeping lf in locs holds: the
// locFrames, its slices and its map entry (TestLocationBytesBound).
func locBytes(lf *locFrames) int64 {
	return 128 + 4*int64(cap(lf.ids)) + int64(cap(lf.text))
}

// frames numbers frames (leaf first) in the table, charging the frames
// new to it: the table keeps them whether a stack is cached or not.
func (c *stackCache) frames(frames []indices.Frame) *locFrames {
	lf := &locFrames{ids: make([]int32, len(frames))}
	var added int64
	for i, f := range frames {
		id, n := c.table.number(f)
		lf.ids[i], added = id, added+n
		lf.text = indices.AppendStackText(lf.text, f)
		lf.bound += frameCost(c.table.frames[id]) + trieNodeBytes + trieBranchBytes
	}
	c.tableBytes += added
	c.charge(added)
	return lf
}

// location is the frames of the location of hash h kept, else nil.
func (c *stackCache) location(h [2]uint64) *locFrames { return c.locs[h] }

// addLocation numbers the frames of the location of hash h and keeps them.
func (c *stackCache) addLocation(h [2]uint64, frames []indices.Frame) *locFrames {
	lf := c.frames(frames)
	n := locBytes(lf)
	c.locs[h] = lf
	c.tableBytes += n
	c.charge(n)
	return lf
}

// add builds the stack of frames (leaf first) and caches it under key.
func (c *stackCache) add(key [2]uint64, frames []indices.Frame) *stackInfo {
	c.begin()
	c.extend(c.frames(frames))
	return c.end(key)
}

// begin starts building a stack, whose frames extend adds (leaf first),
// to cache under a key with end.
func (c *stackCache) begin() {
	c.ids, c.text, c.long, c.bound = c.ids[:0], c.text[:0], false, 0
}

// maxStackTextBytes bounds the text of the stack being built held at
// once: a hostile stack (4,096 locations of one with long names) would
// be hundreds of MiB of text.
const maxStackTextBytes = 64 << 10

func (c *stackCache) extend(lf *locFrames) {
	c.ids = append(c.ids, lf.ids...)
	c.bound += lf.bound
	if len(c.text)+len(lf.text) <= maxStackTextBytes {
		c.text = append(c.text, lf.text...)
		return
	}
	if !c.long {
		if c.sha == nil {
			c.sha = sha256.New()
		}
		c.sha.Reset()
		c.long = true
	}
	c.sha.Write(c.text)
	c.sha.Write(lf.text)
	c.text = c.text[:0]
}

// end caches the stack built under key and returns it. Its trie bound is
// (*frameTrie)(nil).cost, summed from its locations'.
func (c *stackCache) end(key [2]uint64) *stackInfo {
	var sum [sha256.Size]byte
	if c.long {
		c.sha.Write(c.text)
		c.sha.Sum(sum[:0])
	} else {
		sum = sha256.Sum256(c.text)
	}
	c.stats.Built++
	st := &stackInfo{
		id:        indices.StackIDOfSum(sum[:]),
		key:       stackKey(sum[:12]),
		frames:    stackFrames{table: c.table, ids: slices.Clone(c.ids)},
		trieBound: c.bound,
	}
	c.put(key, st, stackBytes(st))
	return st
}

func (c *stackCache) charge(n int64) {
	c.bytes += n
	if c.budget != nil {
		c.budget.used += n
	}
}

// put caches st, of size bytes, under key.
func (c *stackCache) put(key [2]uint64, st *stackInfo, size int64) {
	over := max(c.bytes+size-c.maxBytes, 0)
	if c.budget != nil {
		over = max(over, c.budget.used+size-c.budget.MaxBytes)
	}
	if c.n >= maxCachedStacks || over > 0 {
		c.giveWay(max(over, size))
		// A reset dropped the table of st's frames: cached, st would
		// make the tries switch tables back and forth.
		if c.n >= maxCachedStacks || !c.fits(size) || st.frames.table != c.table {
			return
		}
	}
	// Not found yet: it goes before the stacks found since the last
	// giveWay, with those found in the generation before, so that
	// stacks seen once do not push out those in use.
	st.cachedBytes, st.used = size, c.gen-1
	c.m[key] = st
	c.n++
	c.charge(size)
}

func (c *stackCache) fits(size int64) bool {
	return c.bytes+size <= c.maxBytes && (c.budget == nil || c.budget.used+size <= c.budget.MaxBytes)
}

// giveWay drops cached stacks until n bytes are returned, and an eighth of
// the stacks' bytes more, so that a Budget held near full by the state
// does not drop stacks for every profile. The stacks unused for the most
// generations (calls of giveWay) go first: a host sends a profile every
// 10 seconds and most of its stacks are in the last one, so the stacks of
// the fleet's current hosts stay and those of hosts gone or of stacks
// seen once go. Dropping them in the map's order, about at random, as it
// did until 2026-12-02, dropped the stacks in use as often as the others
// once the hour's state neared the Budget, and they were built again for
// the next profiles: over 30 simulated minutes of the pipeline bench's
// 200 hosts, half of the rollup's CPU. The frame table and the locations
// go too (reset) only when all the stacks do not return n.
func (c *stackCache) giveWay(n int64) {
	if n <= 0 {
		return
	}
	c.stats.GaveWay++
	stacks := c.bytes - c.tableBytes
	if n > stacks {
		c.stats.Resets++
		c.reset()
		return
	}
	n = min(n+stacks/8, stacks)
	// The bytes by age; the stacks older than cut and enough of those of
	// age cut return n.
	var byAge [maxStackAge + 1]int64
	for _, st := range c.m {
		byAge[c.age(st)] += st.cachedBytes
	}
	cut, older := maxStackAge, int64(0)
	for cut > 0 && older+byAge[cut] < n {
		older += byAge[cut]
		cut--
	}
	var freed, atCut int64
	for k, st := range c.m {
		a := c.age(st)
		if a < cut || a == cut && older+atCut >= n {
			continue
		}
		if a == cut {
			atCut += st.cachedBytes
		}
		delete(c.m, k)
		c.n--
		freed += st.cachedBytes
	}
	c.charge(-freed)
	c.gen++
}

// maxStackAge is the age, in generations, past which stacks are not told
// apart.
const maxStackAge = 15

func (c *stackCache) age(st *stackInfo) int { return int(min(c.gen-st.used, maxStackAge)) }

// reset drops every cached stack, the frame table and the locations, and
// returns their charge. A new map: a cleared one would keep its buckets.
func (c *stackCache) reset() {
	c.charge(-c.bytes)
	c.m, c.n = map[[2]uint64]*stackInfo{}, 0
	c.table, c.locs, c.tableBytes = newFrameTable(), map[[2]uint64]*locFrames{}, 0
}

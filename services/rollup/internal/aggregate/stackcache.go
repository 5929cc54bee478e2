package aggregate

import "github.com/stackstream/stackstream/schemas/indices"

// stackCache holds the IDs and frames of the stacks seen, by a 128-bit
// hash of their frames or locations (Partition.stack, wireStack), for
// every partition sharing a Budget: one cache per instance, so a stack
// that hosts of several partitions run is held once. Its bytes are charged
// to the Budget like the window state, and it gives way to the state: when
// folding a profile in would pass the Budget, cached stacks are dropped
// first (Add), and a stack that would pass it is not cached. Until
// 2026-12-01 each partition had a cache of its own, up to 32 MiB, outside
// the Budget: in the 50-host soak the six caches were the largest user of
// the rollup's heap (docs/ROLLUP.md).
type stackCache struct {
	m map[[2]uint64]*stackInfo
	n int // stacks held
	// table numbers the frames of the stacks built; it is dropped with
	// the whole cache (reset), not with the stacks given way.
	table      *frameTable
	tableBytes int64 // frameCost of its frames
	// bytes: stackBytes of the stacks held and tableBytes, charged to
	// budget.
	bytes  int64
	budget *Budget
}

// maxCachedStacks and maxCachedStackBytes bound the stack cache: a stack
// holds a frame per line of its locations, and each frame's names can be
// long (up to record.Limits' MaxStringBytes).
const (
	maxCachedStacks     = 1 << 18
	maxCachedStackBytes = 64 << 20
)

func newStackCache(b *Budget) *stackCache {
	return &stackCache{m: map[[2]uint64]*stackInfo{}, table: newFrameTable(), budget: b}
}

func (c *stackCache) get(key [2]uint64) *stackInfo { return c.m[key] }

// add builds the stack of frames (leaf first) and caches it under key.
// The frames new to the table are charged whether the stack is cached or
// not: the table keeps them.
func (c *stackCache) add(key [2]uint64, frames []indices.Frame) *stackInfo {
	st := &stackInfo{id: indices.StackID(frames)}
	var added int64
	st.frames, added = c.table.stackFrames(frames)
	c.tableBytes += added
	c.charge(added)
	st.trieBound = (*frameTrie)(nil).cost(st.id, st.frames)
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
	over := max(c.bytes+size-maxCachedStackBytes, 0)
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
	st.cachedBytes = size
	c.m[key] = st
	c.n++
	c.charge(size)
}

func (c *stackCache) fits(size int64) bool {
	return c.bytes+size <= maxCachedStackBytes && (c.budget == nil || c.budget.used+size <= c.budget.MaxBytes)
}

// giveWay drops cached stacks until n bytes are returned, and an eighth of
// the stacks' bytes more, so that a Budget held near full by the state
// does not drop stacks for every profile; the stacks dropped are the
// map's iteration order, about at random. Dropping the whole cache
// instead, as it did until 2026-12-01, emptied it every few profiles once
// the state neared the Budget (the pipeline bench's 200 hosts), and every
// stack of the next profiles was built and hashed again.
func (c *stackCache) giveWay(n int64) {
	if n <= 0 {
		return
	}
	stacks := c.bytes - c.tableBytes
	n += stacks / 8
	if n >= stacks {
		// The stacks held do not free n: the table goes too.
		c.reset()
		return
	}
	var freed int64
	for k, st := range c.m {
		if freed >= n {
			break
		}
		delete(c.m, k)
		c.n--
		freed += st.cachedBytes
	}
	c.charge(-freed)
}

// reset drops every cached stack and the frame table, and returns their
// charge. A new map: a cleared one would keep its buckets.
func (c *stackCache) reset() {
	c.charge(-c.bytes)
	c.m, c.n = map[[2]uint64]*stackInfo{}, 0
	c.table, c.tableBytes = newFrameTable(), 0
}

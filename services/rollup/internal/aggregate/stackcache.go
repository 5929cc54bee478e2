package aggregate

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
	m      map[[2]uint64]*stackInfo
	n      int   // stacks held
	bytes  int64 // stackBytes of the stacks held, charged to budget
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
	return &stackCache{m: map[[2]uint64]*stackInfo{}, budget: b}
}

func (c *stackCache) get(key [2]uint64) *stackInfo { return c.m[key] }

// put caches st, of size bytes, under key.
func (c *stackCache) put(key [2]uint64, st *stackInfo, size int64) {
	over := max(c.bytes+size-maxCachedStackBytes, 0)
	if c.budget != nil {
		over = max(over, c.budget.used+size-c.budget.MaxBytes)
	}
	if c.n >= maxCachedStacks || over > 0 {
		c.giveWay(max(over, size))
		if c.n >= maxCachedStacks || !c.fits(size) {
			return
		}
	}
	st.cachedBytes = size
	c.m[key] = st
	c.n++
	c.bytes += size
	if c.budget != nil {
		c.budget.used += size
	}
}

func (c *stackCache) fits(size int64) bool {
	return c.bytes+size <= maxCachedStackBytes && (c.budget == nil || c.budget.used+size <= c.budget.MaxBytes)
}

// giveWay drops cached stacks until n bytes are returned, and an eighth of
// the cache more, so that a Budget held near full by the state does not
// drop stacks for every profile; the stacks dropped are the map's
// iteration order, about at random. Dropping the whole cache instead, as
// it did until 2026-12-01, emptied it every few profiles once the state
// neared the Budget (the pipeline bench's 200 hosts), and every stack of
// the next profiles was built and hashed again.
func (c *stackCache) giveWay(n int64) {
	if n <= 0 {
		return
	}
	n += c.bytes / 8
	if n >= c.bytes {
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
	c.bytes -= freed
	if c.budget != nil {
		c.budget.used -= freed
	}
}

// reset drops every cached stack and returns their charge. A new map: a
// cleared one would keep its buckets.
func (c *stackCache) reset() {
	if c.budget != nil {
		c.budget.used -= c.bytes
	}
	c.m, c.n, c.bytes = map[[2]uint64]*stackInfo{}, 0, 0
}

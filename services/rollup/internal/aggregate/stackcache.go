package aggregate

// stackCache holds the IDs and frames of the stacks seen, by a 128-bit
// hash of their frames or locations (Partition.stack, wireStack), for every partition sharing a Budget:
// one cache per instance, so a stack that hosts of several partitions run
// is held once. Its bytes are charged to the Budget like the window state,
// and it gives way to the state: when folding a profile in would pass the
// Budget, the cache is dropped first (Add), and a stack that would pass it
// is not cached. Until 2026-12-01 each partition had a cache of its own,
// up to 32 MiB, outside the Budget: in the 50-host soak the six caches
// were the largest user of the rollup's heap (docs/ROLLUP.md).
type stackCache struct {
	m      map[[2]uint64]*stackInfo
	n      int   // stacks held
	bytes  int64 // stackBytes of the stacks held, charged to budget
	budget *Budget
}

// maxCachedStacks and maxCachedStackBytes bound the stack cache: a stack
// holds a frame per line of its locations, and each frame's names can be
// long (up to record.Limits' MaxStringBytes); past either the cache starts
// over.
const (
	maxCachedStacks     = 1 << 18
	maxCachedStackBytes = 64 << 20
)

func newStackCache(b *Budget) *stackCache {
	return &stackCache{m: map[[2]uint64]*stackInfo{}, budget: b}
}

func (c *stackCache) get(key [2]uint64) *stackInfo { return c.m[key] }

// put caches st under key.
func (c *stackCache) put(key [2]uint64, st *stackInfo, size int64) {
	if c.n >= maxCachedStacks || c.bytes+size > maxCachedStackBytes || !c.fits(size) {
		c.reset()
		if !c.fits(size) {
			return
		}
	}
	c.m[key] = st
	c.n++
	c.bytes += size
	if c.budget != nil {
		c.budget.used += size
	}
}

func (c *stackCache) fits(size int64) bool {
	return c.budget == nil || c.budget.used+size <= c.budget.MaxBytes
}

// reset drops every cached stack and returns their charge. A new map: a
// cleared one would keep its buckets.
func (c *stackCache) reset() {
	if c.budget != nil {
		c.budget.used -= c.bytes
	}
	c.m, c.n, c.bytes = map[[2]uint64]*stackInfo{}, 0, 0
}

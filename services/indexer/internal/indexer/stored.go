package indexer

import "github.com/stackstream/stackstream/pkg/cache"

// storedStacks remembers the stack IDs OpenSearch acknowledged, with the
// newest last_seen day written, in the services' bounded cache: two
// generations, a stack still in use moved to the newer when the older
// answers, so that it stays known when the older is dropped (one map
// cleared at its bound had every live stack sent again at once, a burst of
// scripted updates to documents already stored). Keys and values are
// inline, no pointers: a million entries take 27-43 MiB and nothing for the
// garbage collector to scan. has may be called from many goroutines at
// once; add from one.
type storedStacks struct {
	c *cache.Bounded[stackKey, day] // nil remembers nothing
}

// newStoredStacks remembers up to bound stacks; none if bound <= 0.
func newStoredStacks(bound int) storedStacks {
	if bound <= 0 {
		return storedStacks{}
	}
	return storedStacks{c: cache.New[stackKey, day](bound, 0)}
}

// has reports whether k is stored for day d or later.
func (s storedStacks) has(k stackKey, d day) bool {
	if s.c == nil {
		return false
	}
	v, ok := s.c.Get(k)
	return ok && v >= d
}

// add remembers that k is stored for day d (an older day never moves it
// back).
func (s storedStacks) add(k stackKey, d day) {
	if s.c == nil {
		return
	}
	if v, ok := s.c.Get(k); ok && v >= d {
		return
	}
	s.c.Put(k, d, 0)
}

// len is the entries remembered.
func (s storedStacks) len() int {
	if s.c == nil {
		return 0
	}
	return s.c.Len()
}

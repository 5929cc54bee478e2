package indexer

import "sync"

// storedStacks remembers the stack IDs OpenSearch acknowledged, with the
// newest last_seen day written, in two generations of at most half its
// bound each. When the newer one is full it becomes the older and the
// older is dropped; a stack found only in the older is moved back to the
// newer (promote). A stack the fleet still uses so stays known across
// the turn: clearing one map at its bound had every live stack sent again
// at once, a burst of scripted updates to documents already stored. A
// stack is in one generation at a time.
//
// has may be called from many goroutines at once (the converting
// workers); add, promote and len only from one, never during has.
type storedStacks struct {
	half     int // entries per generation; 0 remembers nothing
	cur, old map[stackKey]day

	mu   sync.Mutex
	hits []stackKey // found only in old since the last promote
}

// newStoredStacks remembers up to bound stacks; none if bound <= 0.
func newStoredStacks(bound int) *storedStacks {
	s := &storedStacks{cur: map[stackKey]day{}, old: map[stackKey]day{}}
	if bound > 0 {
		s.half = max(bound/2, 1)
	}
	return s
}

// has reports whether k is stored for day d or later. A stack found in
// the older generation is noted for promote.
func (s *storedStacks) has(k stackKey, d day) bool {
	if v, ok := s.cur[k]; ok {
		return v >= d
	}
	v, ok := s.old[k]
	if ok && v >= d {
		s.mu.Lock()
		s.hits = append(s.hits, k)
		s.mu.Unlock()
	}
	return ok && v >= d
}

// add remembers that k is stored for day d.
func (s *storedStacks) add(k stackKey, d day) {
	if s.half == 0 {
		return
	}
	if v, ok := s.cur[k]; ok {
		s.cur[k] = max(v, d)
		return
	}
	if v, ok := s.old[k]; ok {
		d = max(v, d)
		delete(s.old, k)
	}
	if len(s.cur) >= s.half {
		s.cur, s.old = s.old, s.cur
		clear(s.cur)
	}
	s.cur[k] = d
}

// promote moves the stacks has found only in the older generation to the
// newer one.
func (s *storedStacks) promote() {
	s.mu.Lock()
	hits := s.hits
	s.hits = nil
	s.mu.Unlock()
	// Their days are read before any is added: an add may turn the
	// generations and drop the older.
	type entry struct {
		k stackKey
		d day
	}
	moved := make([]entry, 0, len(hits))
	for _, k := range hits {
		if _, ok := s.cur[k]; !ok {
			if v, ok := s.old[k]; ok {
				moved = append(moved, entry{k, v})
			}
		}
	}
	for _, e := range moved {
		s.add(e.k, e.d)
	}
}

// len is the entries of both generations (a stack is in one).
func (s *storedStacks) len() int { return len(s.cur) + len(s.old) }

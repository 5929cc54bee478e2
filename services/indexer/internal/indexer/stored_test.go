package indexer

import (
	"sync"
	"testing"
)

func key(i int) stackKey {
	var k stackKey
	k[0], k[1], k[2] = byte(i), byte(i>>8), byte(i>>16)
	return k
}

// TestStoredStacks: a stack is known for its day and earlier ones; the
// bound holds across generations; a stack still in use stays known when
// the generation that held it is dropped, one no longer seen does not.
func TestStoredStacks(t *testing.T) {
	s := newStoredStacks(100) // 50 a generation
	s.add(key(0), 10)
	if !s.has(key(0), 10) || !s.has(key(0), 9) || s.has(key(0), 11) {
		t.Fatal("day 10 not known for days 9 and 10 only")
	}
	s.add(key(0), 9) // an older day never moves it back
	if !s.has(key(0), 10) {
		t.Fatal("day moved back")
	}
	// Fill the first generation with stacks 0-49; stack 1 stays in use.
	for i := 1; i < 50; i++ {
		s.add(key(i), 10)
	}
	for i := 50; i < 200; i++ {
		if !s.has(key(1), 10) {
			t.Fatalf("stack in use forgotten after %d more stacks", i-50)
		}
		s.add(key(i), 10)
		if s.len() > 100 {
			t.Fatalf("%d entries, bound 100", s.len())
		}
	}
	if s.has(key(2), 10) || s.has(key(60), 10) {
		t.Error("stacks unused for two generations still known")
	}
	if !s.has(key(199), 10) || !s.has(key(150), 10) {
		t.Error("recent stacks forgotten")
	}
	if off := newStoredStacks(-1); func() bool { off.add(key(1), 1); return off.has(key(1), 1) }() {
		t.Error("a disabled cache remembers")
	}
}

// TestStoredStacksConcurrentHas: has from many goroutines at once while
// the older generation answers, moving stacks to the newer (run with
// -race). The stacks in use (10-29) fit a generation: they all stay.
func TestStoredStacksConcurrentHas(t *testing.T) {
	s := newStoredStacks(40) // 20 a generation
	for i := range 30 {
		s.add(key(i), 1) // 0-19 the older, 20-29 the newer
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range 1000 {
				s.has(key(10+i%20), 1)
			}
		})
	}
	wg.Wait()
	for i := 10; i < 30; i++ {
		if !s.has(key(i), 1) {
			t.Fatalf("stack %d forgotten", i)
		}
	}
	if s.len() > 40 {
		t.Fatalf("%d entries, bound 40", s.len())
	}
}

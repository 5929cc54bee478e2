package store

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/stackstream/stackstream/schemas/indices"
)

// headCalls records what a head visitor is handed.
type headCalls struct{ calls []string }

func (c *headCalls) Frames(f []indices.TreeFrame) {
	c.calls = append(c.calls, fmt.Sprint("frames ", f))
}
func (c *headCalls) Node(depth int, frame int32, self, total int64) {
	c.calls = append(c.calls, fmt.Sprint("node ", depth, frame, self, total))
}
func (c *headCalls) Folded(depth int, total int64) {
	c.calls = append(c.calls, fmt.Sprint("folded ", depth, total))
}

func testHead(t *testing.T, stacks, keep int) []byte {
	t.Helper()
	var b indices.TreeBuilder
	for i := 0; i < stacks; i++ {
		b.Add([]indices.TreeFrame{{Name: "main"}, {Name: fmt.Sprintf("f%d", i%7), Kind: "py"}, {Name: fmt.Sprintf("leaf%d", i)}}, int64(i%5+1))
	}
	return b.EncodeHead(keep)
}

// TestHeadVisit: a decoded head hands a visitor what indices.DecodeHead
// hands it, in the same order, and returns the same counts.
func TestHeadVisit(t *testing.T) {
	for _, keep := range []int{1, 5, 40, 1000} {
		enc := testHead(t, 60, keep)
		var want headCalls
		nodes, self, total, err := indices.DecodeHead(enc, indices.TreeLimits{}, &want)
		if err != nil {
			t.Fatal(err)
		}
		h, err := DecodeHead(enc)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // visited twice: a cached head is not used up
			var got headCalls
			n, s, tot := h.Visit(&got)
			if n != nodes || s != self || tot != total || !reflect.DeepEqual(got.calls, want.calls) {
				t.Fatalf("keep %d: Visit = %d %d %d, %d calls; DecodeHead = %d %d %d, %d calls", keep, n, s, tot, len(got.calls), nodes, self, total, len(want.calls))
			}
		}
	}
	if _, err := DecodeHead([]byte{0x42, 1, 2}); err == nil {
		t.Fatal("a bad head decoded")
	}
}

// TestHeadCacheBytes: the cache keeps heads by their whole version, drops
// the least recently used past its bytes, keeps nothing larger than its
// bound, and nothing at all when its bound is 0.
func TestHeadCacheBytes(t *testing.T) {
	h, err := DecodeHead(testHead(t, 60, 40))
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) headVersion {
		return headVersion{Index: "r", ID: fmt.Sprint("id", i), SeqNo: 1, PrimaryTerm: 1, Value: 5, Sources: "s"}
	}
	c := newHeadCache(3 * h.bytes)
	for i := range 3 {
		c.put(key(i), h)
	}
	if c.get(key(0)) != h { // 0 is now the most recent
		t.Fatal("head 0 not kept")
	}
	c.put(key(3), h) // drops 1, the least recently used
	if c.get(key(1)) != nil || c.get(key(0)) == nil || c.get(key(2)) == nil || c.get(key(3)) == nil {
		t.Fatal("not the least recently used dropped")
	}
	if c.cur != 3*h.bytes || c.ll.Len() != 3 || len(c.m) != 3 {
		t.Fatalf("%d bytes in %d heads, want %d in 3", c.cur, c.ll.Len(), 3*h.bytes)
	}
	for _, other := range []headVersion{
		{Index: "r", ID: "id0", SeqNo: 2, PrimaryTerm: 1, Value: 5, Sources: "s"},
		{Index: "r", ID: "id0", SeqNo: 1, PrimaryTerm: 2, Value: 5, Sources: "s"},
		{Index: "q", ID: "id0", SeqNo: 1, PrimaryTerm: 1, Value: 5, Sources: "s"},
		{Index: "r", ID: "id0", SeqNo: 1, PrimaryTerm: 1, Value: 6, Sources: "s"},
		{Index: "r", ID: "id0", SeqNo: 1, PrimaryTerm: 1, Value: 5, Sources: "t"},
	} {
		if c.get(other) != nil {
			t.Fatalf("%+v answered by another version", other)
		}
	}
	small := newHeadCache(h.bytes - 1)
	small.put(key(0), h)
	if small.get(key(0)) != nil {
		t.Fatal("a head larger than the cache kept")
	}
	off := newHeadCache(0)
	off.put(key(0), h)
	if off.get(key(0)) != nil {
		t.Fatal("a cache of 0 bytes kept a head")
	}
}

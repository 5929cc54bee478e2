package aggregate

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"slices"

	"github.com/stackstream/stackstream/schemas/indices"
)

// A stack series (one KindStacks document: a type, service and host's
// stacks in a window) holds each stack's value by the stack's number in
// its hour's stackTable, which holds the stack's ID and trie node once for
// every series and part-hour window of the hour. Until 2026-12-03 a series
// held its stacks by ID string, each with a 32-byte state of its own (its
// samples, first offset, node and flags, of which the document reads only
// the sums): at the end of an hour of 200 loadgen hosts those maps were
// 102 MB of the rollup's heap, and a stack new to a series was looked up
// in the trie for every series it ran in.

// stackTable numbers the distinct stacks of an hour window; its part-hour
// windows share it (as they share its trie): the hour is a target of every
// profile its part-hour windows are (a window is skipped only past
// retention, and the hour ends last), so the hour's fold numbers the
// profile's stacks first.
type stackTable struct {
	index  map[stackKey]int32
	stacks []tableStack
}

// stackKey is a stack's ID as the 12 bytes of its hash that the ID
// encodes (indices.StackIDOfSum): a 12-byte map key where the ID string
// took a 16-byte header and its 16 bytes of text, which a stack dropped
// from the stack cache kept alive in the table (until 2026-12-03).
type stackKey [12]byte

// id is the stack's ID, as documents name it.
func (k stackKey) id() string { return indices.StackIDOfSum(k[:]) }

// tableStack is a stack of the hour: its key and its node in the hour's
// trie.
type tableStack struct {
	key  stackKey
	node int32
}

// Charges (measured by TestStateBytesBound and TestFleetStateBytes with a
// margin): a stack of a series (a Go map slot of an int32 and an int64,
// 24-37 bytes held at the load of a map growing, as nodeValueBytes); a
// stack new to the hour's table (its map slot of a 12-byte key and an
// int32, and its 16-byte entry, with the slack of their growth; 120 and
// the ID's length with the ID string as the key).
const (
	stackDocBytes   = 40
	tableStackBytes = 80
)

func newStackTable() *stackTable {
	return &stackTable{index: map[stackKey]int32{}}
}

// number returns the number of the stack key, adding it with no node
// when new (the caller inserts it into the trie).
func (t *stackTable) number(key stackKey) (int32, bool) {
	if n, ok := t.index[key]; ok {
		return n, false
	}
	n := int32(len(t.stacks))
	t.index[key] = n
	t.stacks = append(t.stacks, tableStack{key: key})
	return n, true
}

// stackNumbers numbers the stacks of the profile in p.out in the hour
// window w's table, inserting the stacks new to the hour into its trie,
// and sets p.slots and p.nodes for the part-hour windows.
func (p *Partition) stackNumbers(w *window) {
	if w.table == nil {
		w.table = newStackTable()
	}
	var added int64
	for sk, sc := range p.out {
		if sk.kind != indices.KindStack {
			continue
		}
		for _, i := range sc.names {
			st := p.deltas[i].stack
			n, isNew := w.table.number(st.key)
			if isNew {
				if w.trie == nil {
					w.trie = newFrameTrie()
				}
				node, bytes := w.trie.insert(st.frames)
				w.table.stacks[n].node = node
				added += tableStackBytes + bytes
			}
			p.slots[i], p.nodes[i] = n, w.table.stacks[n].node
		}
	}
	p.charge(w, added)
}

// foldStacks adds a profile's stacks of one series (their numbers in
// p.slots) to the series ws of window w.
func (p *Partition) foldStacks(w *window, ws *series, sc *scratch) {
	var added int64
	for _, i := range sc.names {
		d := &p.deltas[i]
		held := len(ws.stacks)
		ws.stacks[p.slots[i]] += d.value
		if len(ws.stacks) != held {
			added += stackDocBytes
		}
		ws.sums.a += d.value
		ws.sums.b += d.samples
	}
	p.charge(w, added)
	p.markDirty(w, &ws.sums)
}

// eachStack calls fn for each stack of a stack series of w, live or
// frozen, with its node in the hour's trie and its value; in stack ID
// order when ordered (trees encode to the same bytes every time), else
// in any.
func (w *window) eachStack(ws *series, ordered bool, fn func(node int32, x int64)) {
	t := w.table
	if !ordered {
		if ws.frozen != nil {
			ws.eachFrozenStack(func(n int32, x int64) { fn(t.stacks[n].node, x) })
			return
		}
		for n, x := range ws.stacks {
			fn(t.stacks[n].node, x)
		}
		return
	}
	// By the IDs' text: their base64 is not in the order of their bytes.
	type stackValue struct {
		id [16]byte
		n  int32
		x  int64
	}
	list := make([]stackValue, 0, ws.count())
	add := func(n int32, x int64) {
		s := stackValue{n: n, x: x}
		base64.RawURLEncoding.Encode(s.id[:], t.stacks[n].key[:])
		list = append(list, s)
	}
	if ws.frozen != nil {
		ws.eachFrozenStack(add)
	} else {
		for n, x := range ws.stacks {
			add(n, x)
		}
	}
	slices.SortFunc(list, func(a, b stackValue) int { return bytes.Compare(a.id[:], b.id[:]) })
	for _, s := range list {
		fn(t.stacks[s.n].node, s.x)
	}
}

// count is the number of documents (or stacks) a series holds.
func (ws *series) count() int {
	n := len(ws.docs) + len(ws.stacks)
	if ws.stack {
		ws.eachFrozenStack(func(int32, int64) { n++ })
	} else {
		ws.eachFrozen(func([]byte, docState) { n++ })
	}
	return n
}

// encodeStacks replaces a stack series' map by one byte string, its
// stacks in number order, each number as the difference to the one
// before (eachFrozenStack reads it), charged its capacity instead of
// the map's stackDocBytes a stack, which thawing charges again. buf is
// scratch.
func (p *Partition) encodeStacks(w *window, ws *series, buf *[]byte) {
	numbers := make([]int32, 0, len(ws.stacks))
	for n := range ws.stacks {
		numbers = append(numbers, n)
	}
	slices.Sort(numbers)
	b := (*buf)[:0]
	last := int32(0)
	for _, n := range numbers {
		b = binary.AppendUvarint(b, uint64(n-last))
		b = binary.AppendVarint(b, ws.stacks[n])
		last = n
	}
	*buf = b
	live := int64(len(ws.stacks)) * stackDocBytes
	ws.frozen = bytes.Clone(b)
	ws.thawBytes = live
	ws.stacks = nil
	w.encoded++
	p.charge(w, int64(cap(ws.frozen))-live)
}

// thawStacks gives a frozen stack series its map back.
func (ws *series) thawStacks() {
	n := 0
	ws.eachFrozenStack(func(int32, int64) { n++ })
	ws.stacks = make(map[int32]int64, n)
	ws.eachFrozenStack(func(n int32, x int64) { ws.stacks[n] = x })
}

// eachFrozenStack calls fn for each stack of a frozen stack series, in
// number order.
func (ws *series) eachFrozenStack(fn func(n int32, x int64)) {
	b := ws.frozen
	n := int32(0)
	for len(b) > 0 {
		d, k := binary.Uvarint(b)
		b = b[k:]
		x, k := binary.Varint(b)
		b = b[k:]
		n += int32(d)
		fn(n, x)
	}
}

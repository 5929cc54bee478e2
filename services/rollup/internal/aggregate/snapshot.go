package aggregate

// A snapshot is a Partition's whole state as bytes: its windows (series,
// documents and their dirty marks, tries, stack tables, 10-minute values,
// frozen and packed forms as they are), its watermark and the marks and
// checkpoint its commits read. Restored, the Partition goes on from the
// offset after the last record it had handled and makes exactly the
// documents, commits and DLQ decisions the one snapshotted would have
// (TestSnapshotRestoresExactly): a restarted or rebalanced consumer reads
// the records since the snapshot, not the hour and more since the commit
// (docs/ROLLUP.md, "Snapshots").
//
// The bytes come back from Kafka, so Restore treats them as hostile: every
// length is bounded by the bytes left, every number that indexes a table is
// checked, and a checksum covers the whole.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/stackstream/stackstream/schemas/bounded"
	"github.com/stackstream/stackstream/schemas/indices"
)

// snapshotMagic starts every snapshot; its last byte is the format's
// version.
const snapshotMagic = "rollup-state\x02"

// ErrBadSnapshot is the error of Restore for bytes that are not a whole
// snapshot of this format.
var ErrBadSnapshot = errors.New("bad rollup snapshot")

// SnapshotAt is the offset a snapshot goes on from: the offset after the
// last record its Partition handled, or -1 before any.
func (p *Partition) SnapshotAt() int64 { return p.next }

// Snapshot appends the partition's state to dst. Take it only between
// flushes with no hour write in flight (HourWrite): the documents it marks
// stored are not written yet.
func (p *Partition) Snapshot(dst []byte) []byte {
	e := snapEncoder{b: append(dst, snapshotMagic...)}
	start := len(e.b)
	e.int(p.watermark)
	e.int(p.restored.Watermark)
	e.int(p.restored.Floor)
	e.int(p.restored.Next)
	e.int(p.baseWatermark)
	e.int(p.next)
	e.int(p.lastCommitted)
	e.int(p.lastNext)
	e.uint(uint64(len(p.marks)))
	for _, m := range p.marks {
		e.int(m.offset)
		e.int(m.watermark)
	}
	// Hours first: their part-hour windows point at their tries.
	e.uint(uint64(len(p.windows)))
	for _, hours := range []bool{true, false} {
		for _, w := range p.windows {
			if (w.key.res == indices.ResolutionHour) == hours {
				e.window(w)
			}
		}
	}
	return binary.BigEndian.AppendUint32(e.b, crc32.ChecksumIEEE(e.b[start:]))
}

type snapEncoder struct{ b []byte }

func (e *snapEncoder) uint(x uint64) { e.b = binary.AppendUvarint(e.b, x) }
func (e *snapEncoder) int(x int64)   { e.b = binary.AppendVarint(e.b, x) }
func (e *snapEncoder) str(s string)  { e.b = bounded.AppendStr(e.b, s) }

func (e *snapEncoder) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func (e *snapEncoder) doc(ds *docState) {
	e.int(ds.a)
	e.int(ds.b)
	e.int(ds.firstOffset)
	e.bool(ds.dirty)
}

func (e *snapEncoder) window(w *window) {
	e.str(w.key.res)
	e.int(w.key.start)
	e.int(w.end)
	e.bool(w.packed)
	e.int(w.minOffset)
	e.bool(w.closed)
	e.int(w.rewriteAt)
	e.bool(w.frozen)
	e.int(int64(w.encoded))
	e.int(int64(w.dirty))
	e.int(w.bytes)
	if w.key.res == indices.ResolutionHour {
		e.bool(w.trie != nil)
		if w.trie != nil {
			e.trie(w.trie)
		}
		e.bool(w.table != nil)
		if w.table != nil {
			e.uint(uint64(len(w.table.stacks)))
			for _, s := range w.table.stacks {
				e.b = append(e.b, s.key[:]...)
				e.int(int64(s.node))
			}
		}
	} else {
		// A part-hour window holds its hour's trie and table, or none.
		e.bool(w.trie != nil)
	}
	e.uint(uint64(len(w.series)))
	for k, ws := range w.series {
		e.str(k.kind)
		e.str(k.typ)
		e.str(k.service)
		e.str(k.host)
		e.series(ws)
	}
	e.uint(uint64(len(w.serviceTrees)))
	for k, ds := range w.serviceTrees {
		e.str(k.kind)
		e.str(k.typ)
		e.str(k.service)
		e.doc(ds)
	}
	e.uint(uint64(len(w.values)))
	for typ, v := range w.values {
		e.str(typ)
		e.uint(uint64(len(v.m)))
		for n, x := range v.m {
			e.int(int64(n))
			e.int(x)
		}
	}
}

func (e *snapEncoder) series(ws *series) {
	e.bool(ws.stack)
	e.doc(&ws.sums)
	e.bool(ws.tree != nil)
	if ws.tree != nil {
		e.doc(ws.tree)
	}
	e.bool(ws.svc != nil)
	if ws.svc != nil {
		e.int(ws.svc.stackValue)
		e.uint(uint64(len(ws.svc.mem)))
		for off, x := range ws.svc.mem {
			e.int(off)
			e.int(x)
		}
	}
	e.bool(ws.frozen != nil)
	if ws.frozen != nil {
		e.str(string(ws.frozen))
		e.int(ws.thawBytes)
		return
	}
	if ws.stack {
		e.uint(uint64(len(ws.stacks)))
		for n, x := range ws.stacks {
			e.int(int64(n))
			e.int(x)
		}
		return
	}
	e.uint(uint64(len(ws.docs)))
	for id, ds := range ws.docs {
		e.str(id)
		e.doc(ds)
	}
}

func (e *snapEncoder) trie(t *frameTrie) {
	e.bool(t.frozen)
	e.int(t.bytes)
	e.uint(uint64(len(t.frames)))
	for _, f := range t.frames {
		e.str(f.Function)
		e.str(f.File)
		e.int(f.Line)
		e.str(f.Binary)
		e.str(f.Kind)
	}
	e.uint(uint64(len(t.nodes)))
	for _, n := range t.nodes[1:] {
		e.int(int64(n.parent))
		e.int(int64(n.frame))
	}
	if t.frozen {
		e.int(int64(t.base))
		e.bool(t.late != nil)
		if t.late != nil {
			e.trie(t.late)
		}
	}
}

// Restore is the partition snapshotted in data, charged to cfg's Budget
// what it was charged when snapshotted. It fails, charging nothing, on
// bytes that are not a whole snapshot, and with ErrStateFull when the
// state does not fit the Budget.
func Restore(cfg Config, data []byte) (*Partition, error) {
	if len(data) < len(snapshotMagic)+4 || string(data[:len(snapshotMagic)]) != snapshotMagic {
		return nil, fmt.Errorf("%w: no header of this version", ErrBadSnapshot)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body[len(snapshotMagic):]) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrBadSnapshot)
	}
	d := snapDecoder{bounded.NewReader(body[len(snapshotMagic):], ErrBadSnapshot)}
	budget := cfg.Budget // charged once whole, below
	cfg.Budget = nil
	p := NewPartition(cfg, Checkpoint{})
	p.watermark = d.Varint()
	p.restored = Checkpoint{Watermark: d.Varint(), Floor: d.Varint(), Next: d.Varint()}
	p.baseWatermark = d.Varint()
	p.next = d.Varint()
	p.lastCommitted = d.Varint()
	p.lastNext = d.Varint()
	for range d.Count(2) {
		p.marks = append(p.marks, mark{offset: d.Varint(), watermark: d.Varint()})
	}
	for range d.Count(10) {
		w := d.window(p)
		if d.Err() != nil {
			break
		}
		if p.windows[w.key] != nil {
			d.Fail("window %s %d twice", w.key.res, w.key.start)
			break
		}
		p.windows[w.key] = w
		p.bytes += w.bytes
	}
	if d.Err() == nil && d.Len() > 0 {
		d.Fail("%d bytes after the state", d.Len())
	}
	if d.Err() != nil {
		return nil, d.Err()
	}
	p.cfg.Budget = budget
	p.stacks = budget.stackCache()
	if budget != nil {
		if budget.used+p.bytes > budget.MaxBytes {
			return nil, fmt.Errorf("%w: the snapshot holds %d bytes of state, %d of %d are used", ErrStateFull, p.bytes, budget.used, budget.MaxBytes)
		}
		budget.used += p.bytes
	}
	return p, nil
}

// snapDecoder reads a snapshot (bounded.Reader: the first error stops it).
type snapDecoder struct{ *bounded.Reader }

// index reads a number that must be in [0, n).
func (d snapDecoder) index(n int) int32 {
	x := d.Varint()
	if x < 0 || x >= int64(n) {
		d.Fail("index %d out of [0, %d)", x, n)
		return 0
	}
	return int32(x)
}

func (d snapDecoder) doc() *docState {
	return &docState{a: d.Varint(), b: d.Varint(), firstOffset: d.Varint(), dirty: d.Bool()}
}

// small reads a count kept in an int, at most the bytes left.
func (d snapDecoder) small() int {
	x := d.Varint()
	if x < 0 || x > int64(d.Len()) {
		d.Fail("count %d out of range", x)
		return 0
	}
	return int(x)
}

func (d snapDecoder) window(p *Partition) *window {
	w := &window{series: map[seriesKey]*series{}, serviceTrees: map[serviceKey]*docState{}}
	w.key.res = d.Str()
	w.key.start = d.Varint()
	w.end = d.Varint()
	if size := indices.WindowSize(w.key.res); size <= 0 || w.end != w.key.start+int64(size) {
		d.Fail("window %q from %d to %d", w.key.res, w.key.start, w.end)
		return w
	}
	w.packed = d.Bool()
	w.minOffset = d.Varint()
	w.closed = d.Bool()
	w.rewriteAt = d.Varint()
	if w.rewriteAt < 0 {
		d.Fail("window rewritten at watermark %d", w.rewriteAt)
	}
	w.frozen = d.Bool()
	w.encoded = d.small()
	w.dirty = d.small()
	w.bytes = d.Varint()
	if w.bytes < 0 {
		d.Fail("window charged %d bytes", w.bytes)
	}
	if w.key.res == indices.ResolutionHour {
		if d.Bool() {
			w.trie = d.trie(0)
		}
		if d.Bool() {
			w.table = d.table(w.trie)
		}
	} else if d.Bool() {
		hour := p.windows[windowKey{res: indices.ResolutionHour, start: truncate(w.key.start, indices.WindowSize(indices.ResolutionHour))}]
		if hour == nil || hour.trie == nil || hour.table == nil {
			d.Fail("%s window at %d without its hour's trie", w.key.res, w.key.start)
			return w
		}
		w.trie, w.table = hour.trie, hour.table
	}
	stacks, nodes := 0, 0
	if w.table != nil {
		stacks = len(w.table.stacks)
	}
	if w.trie != nil {
		nodes, _ = w.trie.counts()
	}
	dirty, encoded := 0, 0
	for range d.Count(6) {
		k := seriesKey{kind: d.Str(), typ: d.Str(), service: d.Str(), host: d.Str()}
		ws := d.series(stacks)
		if d.Err() != nil {
			return w
		}
		if ws.stack != (k.kind == indices.KindStack) || w.series[k] != nil {
			d.Fail("series %+v", k)
			return w
		}
		w.series[k] = ws
		if ws.frozen != nil {
			encoded++
		}
		dirty += ws.dirtyDocs()
	}
	for range d.Count(6) {
		k := serviceKey{kind: d.Str(), typ: d.Str(), service: d.Str()}
		ds := d.doc()
		if w.serviceTrees[k] != nil {
			d.Fail("tree %+v twice", k)
		}
		w.serviceTrees[k] = ds
		if ds.dirty {
			dirty++
		}
	}
	for range d.Count(2) {
		typ := d.Str()
		v := &nodeValues{m: map[int32]int64{}}
		for range d.Count(2) {
			n := d.index(nodes)
			v.m[n] = d.Varint()
		}
		if w.values == nil {
			w.values = map[string]*nodeValues{}
		}
		w.values[typ] = v
	}
	if d.Err() == nil && (dirty != w.dirty || encoded != w.encoded) {
		d.Fail("window counts %d dirty and %d encoded, its series %d and %d", w.dirty, w.encoded, dirty, encoded)
	}
	return w
}

// dirtyDocs counts the series' dirty documents (its frozen ones are
// stored).
func (ws *series) dirtyDocs() int {
	n := 0
	for _, ds := range ws.docs {
		if ds.dirty {
			n++
		}
	}
	if ws.sums.dirty {
		n++
	}
	if ws.tree != nil && ws.tree.dirty {
		n++
	}
	return n
}

func (d snapDecoder) series(stacks int) *series {
	ws := &series{stack: d.Bool()}
	ws.sums = *d.doc()
	if d.Bool() {
		ws.tree = d.doc()
	}
	if d.Bool() {
		ws.svc = &serviceSums{stackValue: d.Varint()}
		if n := d.Count(2); n > 0 {
			ws.svc.mem = make(map[int64]int64, n)
			for range n {
				off := d.Varint()
				ws.svc.mem[off] = d.Varint()
			}
		}
	}
	if d.Bool() {
		ws.frozen = bytes.Clone(d.Bytes())
		ws.thawBytes = d.Varint()
		if ws.frozen == nil {
			ws.frozen = []byte{}
		}
		if d.Err() == nil && !validFrozen(ws, stacks) {
			d.Fail("bad frozen series")
		}
		return ws
	}
	if ws.stack {
		n := d.Count(2)
		ws.stacks = make(map[int32]int64, n)
		for range n {
			s := d.index(stacks)
			ws.stacks[s] = d.Varint()
		}
		return ws
	}
	n := d.Count(5)
	ws.docs = make(map[string]*docState, n)
	for range n {
		id := d.Str()
		ws.docs[id] = d.doc()
	}
	return ws
}

// validFrozen reports whether a frozen series' bytes read whole as
// eachFrozen or eachFrozenStack read them, its stacks numbers of a table
// of that many.
func validFrozen(ws *series, stacks int) bool {
	b := ws.frozen
	if ws.stack {
		n := int64(0)
		for len(b) > 0 {
			delta, k := binary.Uvarint(b)
			if k <= 0 || delta > math.MaxInt32 {
				return false
			}
			b = b[k:]
			if _, k = binary.Varint(b); k <= 0 {
				return false
			}
			b = b[k:]
			n += int64(delta)
			if n >= int64(stacks) {
				return false
			}
		}
		return true
	}
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return false
		}
		b = b[k+int(n):]
		for range 3 {
			if _, k = binary.Varint(b); k <= 0 {
				return false
			}
			b = b[k:]
		}
	}
	return true
}

// trie reads a trie; a late trie (depth 1) is live.
func (d snapDecoder) trie(depth int) *frameTrie {
	t := newFrameTrie()
	t.frozen = d.Bool()
	t.bytes = d.Varint()
	if t.frozen && depth > 0 {
		d.Fail("a frozen late trie")
		return t
	}
	for range d.Count(5) {
		f := indices.Frame{Function: d.Str(), File: d.Str(), Line: d.Varint(), Binary: d.Str(), Kind: d.Str()}
		if d.Err() != nil {
			return t
		}
		if _, ok := t.lookup(f); ok {
			d.Fail("frame %+v twice", f)
			return t
		}
		t.add(f)
	}
	n := d.Count(2)
	if n == 0 {
		d.Fail("a trie without its root")
		return t
	}
	t.nodes = make([]trieNode, 1, n)
	for c := int32(1); int(c) < n; c++ {
		node := trieNode{parent: d.index(int(c)), frame: d.index(len(t.frames))}
		if d.Err() != nil {
			return t
		}
		if t.child(node.parent, node.frame) != 0 {
			d.Fail("node %d twice", c)
			return t
		}
		if node.parent != c-1 {
			t.branches[node] = c
		}
		t.nodes = append(t.nodes, node)
	}
	if t.frozen {
		t.named, t.other, t.branches = nil, nil, nil
		t.base = int32(d.Varint())
		if t.base != int32(len(t.nodes)) {
			d.Fail("frozen trie's base %d, %d nodes", t.base, len(t.nodes))
		}
		if d.Bool() {
			t.late = d.trie(depth + 1)
		}
	}
	return t
}

// table reads an hour's stack table, its stacks nodes of t.
func (d snapDecoder) table(t *frameTrie) *stackTable {
	nodes := 0
	if t != nil {
		nodes, _ = t.counts()
	}
	s := newStackTable()
	n := d.Count(13)
	s.stacks = make([]tableStack, 0, n)
	for i := range n {
		var k stackKey
		copy(k[:], d.Fixed(len(k)))
		node := d.index(nodes)
		if d.Err() != nil {
			return s
		}
		if _, ok := s.index[k]; ok {
			d.Fail("stack %x twice", k)
			return s
		}
		s.index[k] = int32(i)
		s.stacks = append(s.stacks, tableStack{key: k, node: node})
	}
	return s
}

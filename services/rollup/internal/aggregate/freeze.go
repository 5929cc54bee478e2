package aggregate

import (
	"bytes"
	"encoding/binary"
	"slices"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
)

// An hour window that has ended and is wholly stored is frozen by Evict:
// its stack documents become one byte string per series, and its trie
// loses the maps that only inserting needs. A late profile of the hour
// (within lateness + retention of its minute) thaws only the series it
// touches, and its new stacks go to a small live trie beside the frozen one;
// the window freezes again once its rewrite is stored. Held live, the hour
// just ended stayed in memory for lateness + retention (12 minutes) while
// the next hour filled with the same stacks, so every hour boundary
// nearly doubled the state and passed the budget at fleet scale
// (docs/ROLLUP.md, "Hour boundaries").

// freezable: an hour window that has ended and is wholly stored, with
// something left to freeze.
func (p *Partition) freezable(w *window) bool {
	return w.key.res == indices.ResolutionHour && w.trie != nil && !w.frozen && w.dirty == 0 && w.end <= p.watermark
}

// freeze freezes the window's trie and every stack series that holds its
// documents in a map, and charges the window what it holds then.
func (p *Partition) freeze(w *window) {
	p.charge(w, w.trie.freeze())
	var buf []byte
	for _, ws := range w.series {
		if ws.tree == nil || ws.stacks == nil {
			continue
		}
		p.encode(w, ws, &buf)
	}
	w.frozen = true
}

// encode replaces a series' documents map (or stacks, encodeStacks) by
// one byte string (eachFrozen reads it, in name order), charged its
// capacity instead of what the map's documents were charged (docBytes and
// its name each), which thawing charges again. buf is scratch.
func (p *Partition) encode(w *window, ws *series, buf *[]byte) {
	if ws.stack {
		p.encodeStacks(w, ws, buf)
		return
	}
	ids := make([]string, 0, len(ws.docs))
	var live int64
	for id := range ws.docs {
		ids = append(ids, id)
		live += docBytes + int64(len(id))
	}
	slices.Sort(ids)
	b := (*buf)[:0]
	for _, id := range ids {
		ds := ws.docs[id]
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
		b = binary.AppendVarint(b, ds.a)
		b = binary.AppendVarint(b, ds.b)
		b = binary.AppendVarint(b, ds.firstOffset)
	}
	*buf = b
	ws.frozen = bytes.Clone(b)
	ws.thawBytes = live
	w.encoded++
	ws.docs = nil
	p.charge(w, int64(cap(ws.frozen))-live)
}

// thaw gives a frozen (or packed) series its documents back, to fold a
// late profile in; the window freezes (or packs) again once they are
// stored.
func (p *Partition) thaw(w *window, ws *series) {
	if ws.stack {
		ws.thawStacks()
	} else {
		n := 0
		ws.eachFrozen(func([]byte, docState) { n++ })
		ws.docs = make(map[string]*docState, n)
		ws.eachFrozen(func(id []byte, ds docState) { ws.docs[string(id)] = &ds })
	}
	p.charge(w, ws.thawBytes-int64(cap(ws.frozen)))
	ws.frozen, ws.thawBytes = nil, 0
	w.frozen = false
	w.encoded--
}

// thawBytes is what thawing the series of the target windows that p.out
// touches would charge.
func (p *Partition) thawBytes(targets []windowKey) int64 {
	var n int64
	for _, k := range targets {
		w := p.windows[k]
		if w == nil || w.packed || w.encoded == 0 {
			// A packed window is thawed whole (unpackBytes).
			continue
		}
		for sk, sc := range p.out {
			if ws := w.series[sk]; ws != nil && ws.frozen != nil && len(sc.names) > 0 {
				n += ws.thawBytes - int64(cap(ws.frozen))
			}
		}
	}
	return n
}

// eachFrozen calls fn for each document of a frozen service series, in
// name order; id is only valid during the call.
func (ws *series) eachFrozen(fn func(id []byte, ds docState)) {
	b := ws.frozen
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		id := b[k : k+int(n)]
		b = b[k+int(n):]
		var ds docState
		ds.a, k = binary.Varint(b)
		b = b[k:]
		ds.b, k = binary.Varint(b)
		b = b[k:]
		ds.firstOffset, k = binary.Varint(b)
		b = b[k:]
		fn(id, ds)
	}
}

// HourWrite hands an ended hour window's documents out a chunk at a time,
// so that a consumer can store the hour while it folds the next hour's
// records (docs/ROLLUP.md, "Writing the ended hour"): written at once, the
// hour of a fleet stopped consumption for the whole write, and its
// documents, trees encoded, were held all at once.
//
// Next counts the documents it returns stored at once. The caller calls
// it under the lock it holds for every other use of the Partition, and
// neither takes the partition's Pending documents, evicts, freezes nor
// commits it until the documents are stored: a late profile folded in
// meanwhile makes the documents it changes dirty again, to be written
// after them; should their write fail, nothing after the last commit may
// be committed by this Partition.
type HourWrite struct {
	hour time.Time
	docs *Flush // of the hour's window alone
}

// EndedHour returns the write of the earliest hour window later than after
// that has ended, is not frozen (as HoldsEndedHour) and holds documents to
// write; nil when there is none.
func (p *Partition) EndedHour(after time.Time) *HourWrite {
	var w *window
	for _, c := range p.windows {
		if c.key.res == indices.ResolutionHour && c.trie != nil && !c.trie.frozen && c.end <= p.watermark && c.dirty > 0 &&
			c.key.start > after.UnixNano() && (w == nil || c.key.start < w.key.start) {
			w = c
		}
	}
	if w == nil {
		return nil
	}
	return &HourWrite{hour: time.Unix(0, w.key.start).UTC(), docs: &Flush{p: p, windows: []*window{w}}}
}

// Hour is the start of the hour written.
func (h *HourWrite) Hour() time.Time { return h.hour }

// Next returns the hour's next changed documents, series by series until
// their encoded size passes maxBytes, the service and partition trees
// last (they merge every series), and marks them stored. It returns nil
// once every document is.
func (h *HourWrite) Next(maxBytes int) []Pending {
	out := h.docs.Next(maxBytes)
	MarkStored(out)
	return out
}

// pendingBytes is about what a document takes encoded: its tree, its
// stacks and a few hundred bytes of other fields.
func pendingBytes(d *Pending) int {
	n := 256 + len(d.Doc.Tree)*4/3 + len(d.Doc.StackValues)*4/3
	for _, id := range d.Doc.StackIDs {
		n += len(id) + 3
	}
	return n
}

package aggregate

import "github.com/stackstream/stackstream/schemas/indices"

// packedDoc is a document of a written minute window: only what a late
// profile needs to rewrite it whole.
type packedDoc struct {
	name        string
	a, b        int64
	firstOffset int64
	// node is a stack's node in the hour's trie (0: none), for the
	// minute's partition tree.
	node int32
}

// packedDocBytes is the charge of a packedDoc (48 bytes in an exactly sized
// slice, with the slack of its size class), instead of docBytes; names are
// charged on top as before.
const packedDocBytes = 56

// pack turns the documents of a minute window that is closed and wholly
// stored into slices: a minute window stays in memory for lateness +
// retention (12 minutes by default) after it ends, 13 of them for one hour
// window, and their maps and document states were most of the state at
// fleet scale (TestFleetStateBytes). A late profile unpacks the window.
func (p *Partition) pack(w *window) {
	var n int64
	for _, ws := range w.series {
		ws.packed = make([]packedDoc, 0, len(ws.docs))
		for name, ds := range ws.docs {
			ws.packed = append(ws.packed, packedDoc{name: name, a: ds.a, b: ds.b, firstOffset: ds.firstOffset, node: ds.node})
		}
		n += int64(len(ws.docs))
		ws.docs = nil
	}
	w.packed = n
	p.charge(w, -n*(docBytes-packedDocBytes))
}

// unpack gives a packed window its documents back, to fold a late profile
// in.
func (p *Partition) unpack(w *window) {
	for _, ws := range w.series {
		ws.docs = make(map[string]*docState, len(ws.packed))
		for _, d := range ws.packed {
			ws.docs[d.name] = &docState{a: d.a, b: d.b, firstOffset: d.firstOffset, node: d.node, inTree: d.node != 0}
		}
		ws.packed = nil
	}
	p.charge(w, w.packed*(docBytes-packedDocBytes))
	w.packed = 0
}

// unpackBytes is what unpacking the packed target windows would charge.
func (p *Partition) unpackBytes(targets []windowKey) int64 {
	var n int64
	for _, k := range targets {
		if w := p.windows[k]; w != nil {
			n += w.packed * (docBytes - packedDocBytes)
		}
	}
	return n
}

// packable: a minute window closed and wholly stored, not packed yet.
func packable(w *window) bool {
	return w.key.res == indices.ResolutionMinute && w.closed && w.dirty == 0 && w.packed == 0 && len(w.series) > 0
}

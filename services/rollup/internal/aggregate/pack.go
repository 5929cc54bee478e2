package aggregate

import "github.com/stackstream/stackstream/schemas/indices"

// pack encodes every series of a minute window that is closed and wholly
// stored as a frozen hour's stack series are (freeze.go: one byte string
// of its documents, charged its capacity): a minute window stays in
// memory for lateness + retention (12 minutes by default) after it ends,
// 13 of them for one hour window, and their maps and document states were
// most of the state at fleet scale (TestFleetStateBytes). A late profile
// unpacks the window whole (its partition tree reads every series).
//
// Until 2026-12-02 a packed document was a 48-byte struct of its name,
// sums, first offset and node, charged 56 bytes and its name: 72 bytes a
// stack document against about 30 encoded.
func (p *Partition) pack(w *window) {
	var buf []byte
	for _, ws := range w.series {
		if ws.docs != nil || ws.stacks != nil {
			p.encode(w, ws, &buf)
		}
	}
	w.packed = true
}

// unpack gives a packed window its documents back, to fold a late profile
// in.
func (p *Partition) unpack(w *window) {
	for _, ws := range w.series {
		if ws.frozen != nil {
			p.thaw(w, ws)
		}
	}
	w.packed = false
}

// unpackBytes is what unpacking the packed target windows would charge.
func (p *Partition) unpackBytes(targets []windowKey) int64 {
	var n int64
	for _, k := range targets {
		if w := p.windows[k]; w != nil && w.packed {
			for _, ws := range w.series {
				if ws.frozen != nil {
					n += ws.thawBytes - int64(cap(ws.frozen))
				}
			}
		}
	}
	return n
}

// packable: a minute window closed and wholly stored, not packed yet.
func packable(w *window) bool {
	return w.key.res == indices.ResolutionMinute && w.closed && w.dirty == 0 && !w.packed && len(w.series) > 0
}

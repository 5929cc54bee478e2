// The rollup documents of the windows: which to write now, and their
// contents.

package aggregate

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// Pending is a document to write.
type Pending struct {
	Index  string
	ID     string
	Doc    indices.RollupDoc
	Offset int64 // the first record that contributed, for the DLQ
	ds     *docState
	w      *window
}

// Pending returns every document Flush(all) hands out, at once (tests,
// and callers whose state is small).
func (p *Partition) Pending(all bool) []Pending {
	var out []Pending
	f := p.Flush(all)
	for docs := f.Next(math.MaxInt); len(docs) > 0; docs = f.Next(math.MaxInt) {
		out = append(out, docs...)
	}
	return out
}

// Flush hands out the documents to write now a chunk at a time: built
// all at once, a partition's changed documents (its 10-minute partition
// trees, its hour trees and series) were as large as its window state,
// and were all held until OpenSearch stored the last of them
// (docs/ROLLUP.md, "Flushing a chunk at a time").
//
// The documents are those of every window the watermark has closed
// (minute and 10-minute windows are written only then, and with all);
// and, whenever a minute window is written, of the hour windows that have
// ended but are still open (within allowed lateness), so an hour that is
// over reads as fresh as its minutes. The hour in progress is left to its
// minute documents: writing it with every minute would double the
// documents written. With all, every changed document of every window
// (shutdown and revoke).
//
// Next does not mark what it returns stored: the caller marks each chunk
// (MarkStored) once it is written, and calls Next again with the same
// lock held throughout, no record folded in between. A chunk not written
// stays dirty, and the next flush writes it again.
type Flush struct {
	p       *Partition
	windows []*window // to write, in order
	cur     *windowDocs
}

// Flush starts handing out the documents to write now (Flush).
func (p *Partition) Flush(all bool) *Flush {
	f := &Flush{p: p}
	minuteWritten := false
	for _, w := range p.windows {
		if !w.closed && w.end+int64(p.cfg.AllowedLateness) <= p.watermark {
			w.closed = true
		}
		if w.dirty > 0 && isPartHour(w.key.res) && (w.closed && w.rewriteAt <= p.watermark || all) {
			minuteWritten = minuteWritten || w.key.res == indices.ResolutionMinute
			f.windows = append(f.windows, w)
		}
	}
	parts := len(f.windows)
	for _, w := range p.windows {
		ended := w.end <= p.watermark
		// An hour that just ended is written at once, so that it can be
		// frozen (freeze.go); late profiles' rewrites wait for a minute.
		first := ended && w.trie != nil && !w.trie.frozen
		if w.dirty > 0 && w.key.res == indices.ResolutionHour && (w.closed || all || (minuteWritten || first) && ended) {
			f.windows = append(f.windows, w)
		}
	}
	// The same state is written in the same order (a test can stop it
	// part way): the part-hour windows, then the hours.
	byStart := func(a, b *window) int {
		return cmp.Or(cmp.Compare(a.key.start, b.key.start), strings.Compare(a.key.res, b.key.res))
	}
	slices.SortFunc(f.windows[:parts], byStart)
	slices.SortFunc(f.windows[parts:], byStart)
	return f
}

// Next returns the next documents to write, window by window and series
// by series until their encoded size passes maxBytes (so a chunk is at
// most maxBytes and one series' or tree's documents more); nil once every
// document is handed out.
func (f *Flush) Next(maxBytes int) []Pending {
	var out []Pending
	size := 0
	for size < maxBytes {
		if f.cur == nil {
			if len(f.windows) == 0 {
				break
			}
			f.cur = f.p.windowDocs(f.windows[0])
			f.windows = f.windows[1:]
		}
		n := len(out)
		var more bool
		if out, more = f.cur.next(out); !more {
			f.cur = nil
		}
		for i := n; i < len(out); i++ {
			size += pendingBytes(&out[i])
		}
	}
	f.p.built.n.Add(int64(len(out)))
	return out
}

// DocumentsBuilt counts the documents Flush and HourWrite have handed out:
// less those written, the documents a consumer holds.
// Read without the partition's lock (by a test's writer while an hour is
// written in the background).
func (p *Partition) DocumentsBuilt() int64 { return p.built.n.Load() }

type docCount struct{ n atomic.Int64 }

// windowDocs walks one window's changed documents a step at a time: its
// series, then its service and partition trees (they merge every series).
type windowDocs struct {
	p     *Partition
	w     *window
	start time.Time
	index string
	keys  []seriesKey  // the series, in order
	trees []serviceKey // the service and partition trees, once keys are done
	step  int
}

func (p *Partition) windowDocs(w *window) *windowDocs {
	start := time.Unix(0, w.key.start).UTC()
	c := &windowDocs{p: p, w: w, start: start, index: p.cfg.Names.Rollups(start), keys: make([]seriesKey, 0, len(w.series))}
	for k := range w.series {
		c.keys = append(c.keys, k)
	}
	slices.SortFunc(c.keys, func(a, b seriesKey) int {
		return cmp.Or(strings.Compare(a.kind, b.kind), strings.Compare(a.typ, b.typ), strings.Compare(a.service, b.service), strings.Compare(a.host, b.host))
	})
	return c
}

// next appends the changed documents of the window's next series or tree
// to out (none when it has none), and reports whether there is a step
// left. The documents of one step go out together: they share a state
// (a series' stacks, functions and tree; a partition tree and its head;
// a tree and its function table) that the last of them marks stored.
func (c *windowDocs) next(out []Pending) ([]Pending, bool) {
	switch {
	case c.step < len(c.keys):
		k := c.keys[c.step]
		if ws := c.w.series[k]; ws != nil {
			out = c.p.appendSeries(out, c.w, c.start, c.index, k, ws)
		}
	case c.step == len(c.keys):
		// Listed only now: the trees are built from the series as they
		// are when written (an hour write folds records between steps).
		for k, ds := range c.w.serviceTrees {
			if ds.dirty {
				c.trees = append(c.trees, k)
			}
		}
		slices.SortFunc(c.trees, func(a, b serviceKey) int {
			return cmp.Or(strings.Compare(a.kind, b.kind), strings.Compare(a.typ, b.typ), strings.Compare(a.service, b.service))
		})
	case c.step <= len(c.keys)+len(c.trees):
		k := c.trees[c.step-len(c.keys)-1]
		if ds := c.w.serviceTrees[k]; ds != nil && ds.dirty {
			if isPartHour(c.w.key.res) {
				out = c.p.appendPartTree(out, c.w, c.start, c.index, k, ds)
			} else {
				out = c.p.appendServiceTree(out, c.w, c.start, c.index, k, ds)
			}
		}
	default:
		return out, false
	}
	c.step++
	return out, c.step <= len(c.keys)+len(c.trees)
}

// appendSeries appends the changed documents of one series of w.
func (p *Partition) appendSeries(out []Pending, w *window, start time.Time, index string, k seriesKey, ws *series) []Pending {
	if k.kind == indices.KindStack {
		if d, ok := stacksPending(w, start, index, k, ws); ok {
			out = append(out, d)
		}
	} else {
		for name, ds := range ws.docs {
			if ds.dirty {
				out = append(out, p.pending(w, start, index, k, ws, name, ds))
			}
		}
	}
	if ws.tree != nil && ws.tree.dirty {
		out = p.appendFunctions(out, w, start, index, k, ws)
		out = append(out, p.treePending(w, start, index, k, ws))
	}
	return out
}

// serviceKey names a service tree (its kind, type and service) or a
// partition tree (its kind and type).
type serviceKey struct{ kind, typ, service string }

func (p *Partition) markDirty(w *window, ds *docState) {
	if !ds.dirty {
		ds.dirty = true
		w.dirty++
	}
	if w.closed && w.rewriteAt == 0 && isPartHour(w.key.res) {
		w.rewriteAt = p.watermark + int64(RewriteDelay)
	}
}

// markClean marks ds, a dirty document of w, as written; the window's
// rewrite waits for nothing more once none of its documents is dirty.
func (w *window) markClean(ds *docState) {
	ds.dirty = false
	w.dirty--
	if w.dirty == 0 {
		w.rewriteAt = 0
	}
}

// RewriteDelay is how far the watermark moves before a part-hour window
// changed after it closed (a late profile) is written again: a minute's
// partition tree merges every host's stacks, and a trickle of late
// profiles rebuilt it at every flush (part E of the pipeline bench:
// minute trees written up to 13 times each; docs/ROLLUP.md "Late
// profiles' rewrites"). Hours wait likewise, for a minute written.
const RewriteDelay = time.Minute

// serviceTreePending is the service (or partition) tree document of an
// hour: the stacks of every host of the service (of every service) in this
// partition merged, series in (service, host) order and stacks in ID
// order so the same window encodes to the same bytes. Selections that name
// no host read these, one per partition, service and hour (one per
// partition and hour when they name no service either), instead of one
// tree per host.
func (p *Partition) serviceTreePending(w *window, start time.Time, index string, k serviceKey, ds *docState) Pending {
	var hosts []seriesKey
	for sk := range w.series {
		if sk.kind == indices.KindStack && sk.typ == k.typ && (sk.service == k.service || k.kind == indices.KindPartitionTree) {
			hosts = append(hosts, sk)
		}
	}
	slices.SortFunc(hosts, func(a, b seriesKey) int {
		if c := strings.Compare(a.service, b.service); c != 0 {
			return c
		}
		return strings.Compare(a.host, b.host)
	})
	list := make([]*series, len(hosts))
	for i, sk := range hosts {
		list[i] = w.series[sk]
	}
	tt := p.newTrieTree(w)
	tt.addSeries(w, list...)
	d := indices.RollupDoc{
		Timestamp: start, Resolution: w.key.res, Kind: k.kind, Type: k.typ,
		Service: k.service, Partition: p.cfg.Partition, Value: tt.b.Total(), Tree: tt.b.Encode(),
	}
	return Pending{Index: index, ID: indices.RollupID(&d), Doc: d, Offset: ds.firstOffset, ds: ds, w: w}
}

// appendServiceTree appends the service or partition tree document of an
// hour (serviceTreePending), after, for a partition tree, its function
// table (functionTablePending).
func (p *Partition) appendServiceTree(out []Pending, w *window, start time.Time, index string, k serviceKey, ds *docState) []Pending {
	tree := p.serviceTreePending(w, start, index, k, ds)
	if k.kind == indices.KindPartitionTree && w.key.res == indices.ResolutionHour {
		out = append(out, functionTablePending(&tree))
	}
	return append(out, tree)
}

// functionTablePending is the function table of an hour partition tree
// (indices.KindFunctionTable): every function's self and total in the
// tree, the heaviest indices.TableFunctions listed, so a fleet-wide top
// table reads one small document per partition and hour (or day) instead
// of the trees. The tree gets its digest, which the table records as its
// sources: the query trusts a table only beside the tree it was made
// from. The table is written before its tree (as function documents are):
// the tree's state marks both stored.
func functionTablePending(tree *Pending) Pending {
	fns, err := indices.TreeFunctions(tree.Doc.Tree, indices.TreeLimits{})
	if err != nil {
		// The tree was encoded just now: it always decodes.
		panic(fmt.Sprintf("function table of a partition tree: %v", err))
	}
	tree.Doc.Digest = indices.TreeDigest(tree.Doc.Tree)
	d := indices.RollupDoc{
		Timestamp: tree.Doc.Timestamp, Resolution: tree.Doc.Resolution, Kind: indices.KindFunctionTable, Type: tree.Doc.Type,
		Partition: tree.Doc.Partition, Value: fns.Total, Tree: fns.Encode(indices.TableFunctions), Sources: tree.Doc.Digest,
	}
	return Pending{Index: tree.Index, ID: indices.RollupID(&d), Doc: d, Offset: tree.Offset, w: tree.w}
}

// appendFunctions appends the function documents of an hour's stack
// series, computed from its stack documents and their frames in the trie
// (functions): a function's self is the value of the stacks whose leaf it
// is, its total the value of the stacks holding it, counted once per
// stack (recursion). Folding every frame of every sample into a function
// document per minute and hour was most of the CPU per profile, and the
// documents most of the state (docs/ROLLUP.md); the sums are the same.
// They are written whole whenever the series' tree is, and before it: a
// flush marks documents stored in order, so the tree's state (which they
// share) is clean only once they are stored too.
func (p *Partition) appendFunctions(out []Pending, w *window, start time.Time, index string, k seriesKey, ws *series) []Pending {
	fns := p.functions(w, ws)
	slices.SortFunc(fns, func(a, b functionSums) int { return strings.Compare(a.name, b.name) })
	out = slices.Grow(out, len(fns))
	for _, f := range fns {
		d := indices.RollupDoc{
			Timestamp: start, Resolution: w.key.res, Kind: indices.KindFunction, Type: k.typ,
			Service: k.service, Host: k.host, Function: f.name, Self: f.self, Total: f.total,
		}
		out = append(out, Pending{Index: index, ID: indices.RollupID(&d), Doc: d, Offset: ws.tree.firstOffset, w: w})
	}
	return out
}

// hasTree says whether a window's series has a tree document: the stack
// series of hour windows. Minute trees would cost as much disk as the
// samples (one frame table per host and minute), so the minutes at a
// range's edges are read from stacks (see schemas/opensearch.md).
func hasTree(res string, k seriesKey) bool {
	return res == indices.ResolutionHour && k.kind == indices.KindStack
}

// treePending is the tree document of a stack series: every stack of the
// window merged (recomputed whole, like every document), in stack ID order
// so the same window always encodes to the same bytes.
func (p *Partition) treePending(w *window, start time.Time, index string, k seriesKey, ws *series) Pending {
	tt := p.newTrieTree(w)
	tt.addSeries(w, ws)
	d := indices.RollupDoc{
		Timestamp: start, Resolution: w.key.res, Kind: indices.KindTree, Type: k.typ,
		Service: k.service, Host: k.host, Value: tt.b.Total(), Tree: tt.b.Encode(),
	}
	return Pending{Index: index, ID: indices.RollupID(&d), Doc: d, Offset: ws.tree.firstOffset, ds: ws.tree, w: w}
}

// stacksPending is the KindStacks document of a stack series, when one of
// its stacks changed: every stack of the window, packed (one document per
// stack was most of the rollups' bytes on disk: schemas/opensearch.md,
// "Stack rollups"). A stack summed to a negative value (only a hostile
// profile makes one) cannot be packed: it stays in the document's value
// and so reads as samples without a stack.
func stacksPending(w *window, start time.Time, index string, k seriesKey, ws *series) (Pending, bool) {
	if !ws.sums.dirty {
		return Pending{}, false
	}
	ids := make([]string, 0, len(ws.stacks))
	values := make([]int64, 0, len(ws.stacks))
	d := indices.RollupDoc{
		Timestamp: start, Resolution: w.key.res, Kind: indices.KindStacks, Type: k.typ,
		Service: k.service, Host: k.host, Value: ws.sums.a, Samples: ws.sums.b,
	}
	for n, x := range ws.stacks {
		if x >= 0 {
			ids = append(ids, w.table.stacks[n].key.id())
			values = append(values, x)
		}
	}
	// IDs are unique and non-empty (the table's keys) and values
	// non-negative: no error is left.
	if err := d.SetStacks(ids, values); err != nil {
		panic(fmt.Sprintf("pack stacks of %s/%s: %v", k.service, k.host, err))
	}
	return Pending{Index: index, ID: indices.RollupID(&d), Doc: d, Offset: ws.sums.firstOffset, ds: &ws.sums, w: w}, true
}

func (p *Partition) pending(w *window, start time.Time, index string, k seriesKey, ws *series, name string, ds *docState) Pending {
	d := indices.RollupDoc{
		Timestamp: start, Resolution: w.key.res, Kind: k.kind, Type: k.typ,
		Service: k.service, Host: k.host,
	}
	switch k.kind {
	case indices.KindService:
		d.Samples = ds.b
		var sums serviceSums
		if ws.svc != nil {
			sums = *ws.svc
		}
		if sums.mem != nil {
			d.MemAvg, d.MemMax = memStats(sums.mem)
		} else {
			d.Value, d.StackValue = ds.a, sums.stackValue
			if k.typ == string(record.ProfileCPU) {
				d.Cores = float64(ds.a) / float64(indices.WindowSize(w.key.res).Nanoseconds())
			}
		}
	}
	return Pending{Index: index, ID: indices.RollupID(&d), Doc: d, Offset: ds.firstOffset, ds: ds, w: w}
}

// memStats is the average and the maximum, over the memory profiles of the
// window, of the service's summed RSS in each profile.
func memStats(m map[int64]int64) (avg float64, peak int64) {
	var sum int64
	for _, v := range m {
		sum += v
		peak = max(peak, v)
	}
	return float64(sum) / float64(len(m)), peak
}

// MarkStored records that the documents were acknowledged (or sent to the
// DLQ); they are written again only if a late profile changes them.
func MarkStored(docs []Pending) {
	for _, d := range docs {
		// Function documents have no state of their own: their series'
		// tree, written after them, has (appendFunctions).
		if d.ds != nil && d.ds.dirty {
			d.w.markClean(d.ds)
		}
	}
}

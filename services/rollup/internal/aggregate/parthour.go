package aggregate

// Part-hour documents (schemas/opensearch.md, "Part-hour documents"): a
// partition tree per type, partition and minute, and per 10-minute window
// service documents and a partition tree, so that the edges of a long range
// (up to ~75 minutes a side) read a few trees instead of every host's
// minute stacks.
//
// Their stacks are nodes of the hour's frame trie, which every stack of
// the hour is inserted into anyway: a minute or 10-minute window points at
// its hour's trie (window.trie) and holds no frames. A minute window keeps
// each host's stacks already (its stacks documents), each with its node, so
// its partition tree is summed from them when written. A 10-minute window
// keeps no host's stacks: per type, the value of each trie node its stacks
// reached, summed over the partition's hosts (nodeValues), charged to the
// window by node. Trie nodes are numbered
// as stacks arrive and as the hour was frozen, so the trees are encoded
// with sorted children (indices.TreeBuilder.EncodeSorted): the same window
// gives the same bytes on a replay. They are deflated (indices.Deflate):
// a part-hour tree is mostly frame names, and stored as base64 they took
// twice the bytes on disk (docs/ROLLUP.md, "Part-hour documents").

import (
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
)

// nodeValues are a 10-minute window's stack values by trie node: the
// nodes its stacks reached, each with its sum (a stack of value 0 still
// has its path in the tree). Until 2026-12-02 they were a slice over
// every node of the hour's trie: at 200 loadgen hosts a window's stacks
// were one node in 14 of the trie's, and those slices (and the minutes'
// scratch of the same size) were a quarter of the rollup's heap.
type nodeValues struct {
	m map[int32]int64
}

// nodeValuesBytes is the charge of a nodeValues and its map entry, and
// nodeValueBytes that of a node in it: a Go map slot of an int32 and an
// int64 held 24-37 bytes measured, with the slack of its growth.
const (
	nodeValuesBytes = 160
	nodeValueBytes  = 40
)

// add adds x to node n and returns what it charged: a node new to v.
func (v *nodeValues) add(n int32, x int64) int64 {
	if v.m == nil {
		v.m = map[int32]int64{}
	}
	// One lookup: a node new to v is one the map grew by.
	held := len(v.m)
	v.m[n] += x
	if len(v.m) == held {
		return 0
	}
	return nodeValueBytes
}

// each calls fn for every node with a value that is not negative (a
// negative sum comes only from a hostile profile; trees leave it out),
// in no order: the trees of these values are encoded sorted.
func (v *nodeValues) each(_ bool, fn func(node int32, x int64)) {
	for n, x := range v.m {
		if x >= 0 {
			fn(n, x)
		}
	}
}

// partitionTree is the state of a part-hour window's partition tree of
// type typ, added (and charged) when new.
func (p *Partition) partitionTree(w *window, typ string, offset int64) *docState {
	k := serviceKey{indices.KindPartitionTree, typ, ""}
	ds := w.serviceTrees[k]
	if ds == nil {
		ds = &docState{firstOffset: offset}
		w.serviceTrees[k] = ds
		p.charge(w, docBytes)
	}
	return ds
}

// foldTenMinutes adds a profile's stack series sc (its stacks' nodes in
// p.nodes, found in the hour window) to a 10-minute window's values.
func (p *Partition) foldTenMinutes(w *window, typ string, sc *scratch, offset int64) {
	v := w.values[typ]
	if v == nil {
		if w.values == nil {
			w.values = map[string]*nodeValues{}
		}
		v = &nodeValues{}
		w.values[typ] = v
		p.charge(w, nodeValuesBytes)
	}
	if w.trie != nil {
		// Charged by the nodes new to v, not by their numbers: node
		// numbers follow the order stacks were inserted in, the nodes a
		// window's stacks reach do not, so the same profiles charge the
		// same.
		var n int64
		for _, i := range sc.names {
			if node := p.nodes[i]; node != 0 {
				n += v.add(node, p.deltas[i].value)
			}
		}
		p.charge(w, n)
	}
	p.markDirty(w, p.partitionTree(w, typ, offset))
}

// tenMinutesBytes bounds what the 10-minute target windows' values grow
// by for the profile in p.out: each of its stacks a node new to them.
func (p *Partition) tenMinutesBytes(targets []windowKey) int64 {
	var stacks int64
	for sk, sc := range p.out {
		if sk.kind == indices.KindStack {
			stacks += int64(len(sc.names))
		}
	}
	var n int64
	for _, k := range targets {
		if k.res == indices.ResolutionTenMinutes {
			n += stacks * nodeValueBytes
		}
	}
	return n
}

// isPartHour: a minute or 10-minute window, whose stacks are nodes of its
// hour's trie.
func isPartHour(res string) bool {
	return res == indices.ResolutionMinute || res == indices.ResolutionTenMinutes
}

// writesTree: a window of resolution res has a partition tree state of
// its own (hours have theirs with their hosts' trees): every part-hour
// window writes its partition head, and its tree unless it is a minute
// and minute trees are off (writesWholeTree).
func (p *Partition) writesTree(res string) bool {
	return isPartHour(res)
}

// writesWholeTree: a part-hour window of resolution res writes its whole
// partition tree, not only its head.
func (p *Partition) writesWholeTree(res string) bool {
	return res == indices.ResolutionTenMinutes || res == indices.ResolutionMinute && !p.cfg.NoMinuteTrees
}

// DefaultHeadMinNodes is the service's Config.HeadMinNodes: a window's
// head is written when it leaves out at least three quarters of its
// tree's nodes, so it costs a fraction of the tree's bytes (a head of a
// whole small tree cost 0.70 bytes per raw sample a minute, at 7
// simulated hosts a partition); a window of fewer nodes is read as its
// tree, or per stack, which is cheap at that size.
const DefaultHeadMinNodes = 4 * indices.WindowHeadNodes

// appendPartTree appends a part-hour window's partition tree of type
// k.typ (every stack of every host of the window in this partition,
// merged), when it writes one (writesWholeTree), and the tree's head
// (indices.KindPartitionHead: its indices.WindowHeadNodes heaviest nodes,
// the value of each kept node's other children folded) when the tree has
// more than Config.HeadMinNodes nodes. A minute's tree is
// summed from its hosts' stacks (a host's stack summed to a negative value
// left out, as in the hour's trees); a 10-minute window's from its values.
// Both documents share the window's state: they are written, and
// rewritten, together.
func (p *Partition) appendPartTree(out []Pending, w *window, start time.Time, index string, k serviceKey, ds *docState) []Pending {
	tt := p.newTrieTree(w)
	if w.key.res == indices.ResolutionMinute {
		// Its hosts' stacks, each added to the tree (a node's hosts summed
		// there).
		tt.add(func(_ bool, fn func(node int32, x int64)) {
			for sk, ws := range w.series {
				if sk.kind != indices.KindStack || sk.typ != k.typ {
					continue
				}
				// A stack at the trie's root (no frame) is left out, as
				// the 10-minute values leave it.
				w.eachStack(ws, false, func(node int32, x int64) {
					if node != 0 && x >= 0 {
						fn(node, x)
					}
				})
			}
		})
	} else if v := w.values[k.typ]; v != nil {
		tt.add(v.each)
	}
	var docs []indices.RollupDoc
	if tt.b.Nodes() > p.cfg.HeadMinNodes {
		docs = append(docs, indices.RollupDoc{
			Timestamp: start, Resolution: w.key.res, Kind: indices.KindPartitionHead, Type: k.typ,
			Partition: p.cfg.Partition, Value: tt.b.Total(), Tree: tt.b.EncodeHead(indices.WindowHeadNodes),
		})
	}
	if p.writesWholeTree(w.key.res) {
		docs = append(docs, indices.RollupDoc{
			Timestamp: start, Resolution: w.key.res, Kind: indices.KindPartitionTree, Type: k.typ,
			Partition: p.cfg.Partition, Value: tt.b.Total(), Tree: indices.Deflate(tt.b.EncodeSorted()),
		})
	}
	if len(docs) == 0 {
		// A minute's tree too small for a head, minute trees off: nothing
		// to write, so nothing to wait for (left dirty, the minute would
		// never be evicted and would hold the commit at its first record).
		w.markClean(ds)
		return out
	}
	for _, d := range docs {
		out = append(out, Pending{Index: index, ID: indices.RollupID(&d), Doc: d, Offset: ds.firstOffset, ds: ds, w: w})
	}
	return out
}

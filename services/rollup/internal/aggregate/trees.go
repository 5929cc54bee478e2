package aggregate

import "github.com/stackstream/stackstream/schemas/indices"

// An hour's trees and function documents are built from its stack
// documents' nodes in the window's frame trie. Reading each stack's frames
// back and adding them to a tree frame by frame (two map lookups per frame,
// for the host's tree, its service tree and the partition tree) was a third
// of the rollup's CPU in the pipeline bench's part A; the trie already is
// a prefix tree of the frames, so a trie node's tree node is found once
// per tree (from its caller's), and each stack then costs the walk adding
// its value. The trees encode to the same bytes (indices.TreeBuilder.Child,
// TestDocumentsGolden).

// stamp is a memo entry valid for one tree (or one series' functions):
// gen is the use it was set in.
type stamp struct {
	gen uint32
	v   int32
}

// trieMemo is a Partition's scratch for building trees and functions:
// by trie node its tree node, by trie frame its tree frame (or its
// function's index). Entries of an earlier use are told apart by their
// gen, so it is not cleared.
type trieMemo struct {
	gen    uint32
	nodes  []stamp
	frames []stamp
	path   []int32
}

// use starts a use of the memo for trie t.
func (m *trieMemo) use(t *frameTrie) uint32 {
	nodes, frames := t.counts()
	if len(m.nodes) < nodes {
		m.nodes = make([]stamp, nodes+nodes/4)
	}
	if len(m.frames) < frames {
		m.frames = make([]stamp, frames+frames/4)
	}
	m.gen++
	if m.gen == 0 {
		// Wrapped around: entries of 2^32 uses ago would look current.
		clear(m.nodes)
		clear(m.frames)
		m.gen = 1
	}
	return m.gen
}

// trieTree builds one tree from stacks held in a window's trie.
type trieTree struct {
	b   indices.TreeBuilder
	t   *frameTrie
	m   *trieMemo
	gen uint32
}

func (p *Partition) newTrieTree(w *window) *trieTree {
	t := w.trie
	if t == nil {
		// No stack in the hour: the tree of no stacks.
		t = newFrameTrie()
	}
	return &trieTree{t: t, m: &p.memo, gen: p.memo.use(t)}
}

// node is the tree node of trie node n, added with its callers' when the
// tree has none yet.
func (tt *trieTree) node(n int32) int32 {
	path := tt.m.path[:0]
	for n != 0 && tt.m.nodes[n].gen != tt.gen {
		path = append(path, n)
		n, _ = tt.t.nodeAt(n)
	}
	at := int32(0)
	if n != 0 {
		at = tt.m.nodes[n].v
	}
	for i := len(path) - 1; i >= 0; i-- {
		_, f := tt.t.nodeAt(path[i])
		fs := &tt.m.frames[f]
		if fs.gen != tt.gen {
			*fs = stamp{gen: tt.gen, v: tt.b.Frame(indices.TreeFrameOf(*tt.t.frameAt(f)))}
		}
		at = tt.b.Child(at, fs.v)
		tt.m.nodes[path[i]] = stamp{gen: tt.gen, v: at}
	}
	tt.m.path = path
	return at
}

// add adds the stacks each calls its function with (a trie node and its
// value, not negative), in the order it calls them when ordered, after
// sizing the builder: the tree has at most the trie nodes on the stacks'
// paths and their frames (fewer when two trie frames have one name, or a
// late stack repeats a frozen one), counted in a use of the memo of its
// own. Grown by doubling, a large tree's builder held up to three times
// its nodes while it grew.
func (tt *trieTree) add(each func(ordered bool, fn func(node int32, x int64))) {
	count := tt.m.use(tt.t)
	nodes, frames := 0, 0
	each(false, func(n int32, _ int64) {
		for n != 0 && tt.m.nodes[n].gen != count {
			tt.m.nodes[n].gen = count
			nodes++
			var f int32
			n, f = tt.t.nodeAt(n)
			if tt.m.frames[f].gen != count {
				tt.m.frames[f].gen = count
				frames++
			}
		}
	})
	tt.gen = tt.m.use(tt.t)
	tt.b.Grow(nodes, frames)
	each(true, func(n int32, x int64) { tt.b.AddValue(tt.node(n), x) })
}

// addSeries adds the stack series' stacks (of window w), series after
// series, each in stack ID order (the same state encodes to the same
// bytes). A negative stack is left out, as indices.TreeBuilder.AddStack
// leaves it.
func (tt *trieTree) addSeries(w *window, list ...*series) {
	tt.add(func(ordered bool, fn func(node int32, x int64)) {
		for _, ws := range list {
			w.eachStack(ws, ordered, func(node int32, x int64) {
				if x >= 0 {
					fn(node, x)
				}
			})
		}
	})
}

// functionSums is a function document's sums.
type functionSums struct {
	name        string
	self, total int64
}

// functions sums an hour stack series' stacks per function: self over the
// stacks whose leaf it is (the empty name for a stack without frames),
// total over the stacks holding it, once per stack (recursion). Every
// function of every stack gets its sums, zero or not.
func (p *Partition) functions(w *window, ws *series) []functionSums {
	var out []functionSums
	if w.trie == nil {
		return out
	}
	m := &p.memo
	gen := m.use(w.trie)
	index := map[string]int32{}
	fn := func(name string) int32 {
		i, ok := index[name]
		if !ok {
			i = int32(len(out))
			out = append(out, functionSums{name: name})
			index[name] = i
		}
		return i
	}
	// seen[i] is the last stack that counted function i in its total.
	var seen []int32
	stack := int32(0)
	w.eachStack(ws, false, func(node int32, x int64) {
		stack++
		if node == 0 {
			out[fn("")].self += x
			return
		}
		leaf := true
		for n := node; n != 0; {
			parent, f := w.trie.nodeAt(n)
			st := &m.frames[f]
			if st.gen != gen {
				*st = stamp{gen: gen, v: fn(w.trie.frameAt(f).Function)}
			}
			i := st.v
			for len(seen) < len(out) {
				seen = append(seen, 0)
			}
			if leaf {
				out[i].self += x
				leaf = false
			}
			if seen[i] != stack {
				seen[i] = stack
				out[i].total += x
			}
			n = parent
		}
	})
	return out
}

package indices

import (
	"slices"
	"strconv"
	"strings"
)

// Day trees: a settled day's hour partition trees of one (type, partition)
// merged into one document (resolution 1d), so a fleet's day reads one
// tree per partition instead of 24. The hour trees can be rewritten after
// the day tree was made (a late profile, a replay, re-symbolized frames),
// so a day tree records which versions of its hours it merged: Sources is
// a hash of their _id, _seq_no and _primary_term. A day tree is used only
// when its Sources equals the fingerprint of the hour trees as they are.

// TreeSource is one hour tree document's version.
type TreeSource struct {
	ID                 string
	SeqNo, PrimaryTerm int64
}

// TreeSources is the fingerprint of a set of hour tree versions, in any
// order.
func TreeSources(src []TreeSource) string {
	parts := make([]string, len(src))
	for i, s := range src {
		parts[i] = s.ID + ":" + strconv.FormatInt(s.SeqNo, 10) + ":" + strconv.FormatInt(s.PrimaryTerm, 10)
	}
	slices.Sort(parts)
	return strconv.Itoa(len(src)) + "-" + hashID(strings.Join(parts, ","))
}

// AddTree adds an encoded tree to b node by node: the tree's frames are
// interned once, then each node adds its self and total to b's node of the
// same path, found among its parent's children, so a node costs one lookup
// whatever its depth. Nodes of value 0 are kept, as the query's merge of
// trees keeps them. On an error b holds part of the tree: discard it.
func (b *TreeBuilder) AddTree(enc []byte, lim TreeLimits) error {
	b.init()
	v := &treeAdder{b: b, path: []int32{0}}
	rootSelf, rootTotal, err := DecodeTree(enc, lim, v)
	if err != nil {
		return err
	}
	b.nodes[0].self += rootSelf
	b.nodes[0].total += rootTotal
	return nil
}

type treeAdder struct {
	b      *TreeBuilder
	frames []int32 // b's frame of each of the tree's frames
	path   []int32 // b's nodes on the path to the last node
}

func (a *treeAdder) Frames(f []TreeFrame) {
	a.frames = make([]int32, len(f))
	for i, fr := range f {
		a.frames[i] = a.b.frame(fr)
	}
}

func (a *treeAdder) Node(depth int, frame int32, self, total int64) {
	c := a.b.child(a.path[depth-1], a.frames[frame])
	a.b.nodes[c].self += self
	a.b.nodes[c].total += total
	a.path = append(a.path[:depth], c)
}

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

// AddTree adds an encoded tree to b: each node's self along its path, so
// the totals are rebuilt from the selfs.
func (b *TreeBuilder) AddTree(enc []byte, lim TreeLimits) error {
	v := &treeAdder{b: b}
	rootSelf, _, err := DecodeTree(enc, lim, v)
	if err != nil {
		return err
	}
	if rootSelf > 0 {
		b.Add(nil, rootSelf)
	}
	return nil
}

type treeAdder struct {
	b      *TreeBuilder
	frames []TreeFrame
	path   []TreeFrame
}

func (a *treeAdder) Frames(f []TreeFrame) { a.frames = f }

func (a *treeAdder) Node(depth int, frame int32, self, _ int64) {
	a.path = append(a.path[:depth-1], a.frames[frame])
	if self > 0 {
		a.b.Add(a.path, self)
	}
}

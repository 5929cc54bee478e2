package aggregate

import (
	"weak"

	"github.com/stackstream/stackstream/schemas/indices"
)

// frameTable numbers distinct trie frames (trieFrame): an hour's trie
// numbers its own frames with one, and the stack cache numbers the frames
// of the stacks it builds with another, so that a cached stack holds its
// frames as IDs (stackFrames) and a trie finds its frame for one by an
// integer, not by name, for every frame of every stack it inserts.
type frameTable struct {
	frames []indices.Frame
	// By function name those of native code with a name (most of them: a
	// string key costs a fraction of the whole frame's), the others by
	// the whole frame.
	named map[string]int32
	other map[indices.Frame]int32
	// self lets a trie remember which table its IDs of a table's frames
	// came from without keeping the table (one the stack cache dropped)
	// alive.
	self weak.Pointer[frameTable]
}

func newFrameTable() *frameTable {
	t := &frameTable{named: map[string]int32{}, other: map[indices.Frame]int32{}}
	t.self = weak.Make(t)
	return t
}

// isNamed: a trie frame of native code with a name, held in named.
func isNamed(f indices.Frame) bool {
	return f.Kind == "" && f.Binary == "" && f.Function != ""
}

func (t *frameTable) lookup(f indices.Frame) (int32, bool) {
	if isNamed(f) {
		id, ok := t.named[f.Function]
		return id, ok
	}
	id, ok := t.other[f]
	return id, ok
}

// add numbers a frame that lookup does not find.
func (t *frameTable) add(f indices.Frame) int32 {
	id := int32(len(t.frames))
	t.frames = append(t.frames, f)
	if isNamed(f) {
		t.named[f.Function] = id
	} else {
		t.other[f] = id
	}
	return id
}

// stackFrames are a stack's trie frames, leaf first, as IDs of table.
type stackFrames struct {
	table *frameTable
	ids   []int32
}

// number is the ID of frame f's trie frame (trieFrame), added if new,
// and the bytes it added (frameCost, or 0).
func (t *frameTable) number(f indices.Frame) (int32, int64) {
	tf := trieFrame(f)
	if id, ok := t.lookup(tf); ok {
		return id, 0
	}
	return t.add(tf), frameCost(tf)
}

// stackFrames numbers a stack's frames and returns them with the bytes
// the frames new to t add.
func (t *frameTable) stackFrames(frames []indices.Frame) (stackFrames, int64) {
	ids := make([]int32, len(frames))
	var added int64
	for i, f := range frames {
		var n int64
		ids[i], n = t.number(f)
		added += n
	}
	return stackFrames{table: t, ids: ids}, added
}

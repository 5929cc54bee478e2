package aggregate

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// pathValues decodes a tree into "root;...;leaf" -> [self, total].
type pathValues struct {
	frames []indices.TreeFrame
	path   []string
	out    map[string][2]int64
}

func (p *pathValues) Frames(f []indices.TreeFrame) { p.frames = f }

func (p *pathValues) Node(depth int, frame int32, self, total int64) {
	p.path = append(p.path[:depth-1], p.frames[frame].Name)
	k := strings.Join(p.path, ";")
	v := p.out[k]
	p.out[k] = [2]int64{v[0] + self, v[1] + total}
}

func decodeTree(t *testing.T, b []byte) map[string][2]int64 {
	t.Helper()
	p := &pathValues{out: map[string][2]int64{}}
	if _, _, err := indices.DecodeTree(b, indices.TreeLimits{}, p); err != nil {
		t.Fatal(err)
	}
	return p.out
}

// TestHourTrees: an hour's tree is its stack documents merged by frame
// name (checked against a brute-force merge of those documents), encodes
// to the same bytes every time, and is rewritten whole when a late
// profile changes the hour.
func TestHourTrees(t *testing.T) {
	p := NewPartition(testConfig(), Checkpoint{})
	labels := map[string]string{record.LabelService: "checkout", record.LabelPID: "1"}
	prof := func(at time.Duration, stacks ...[]string) *pproftest.Builder {
		b := pproftest.NewCPU(t0.Add(at), 10*time.Second)
		for i, s := range stacks {
			b.Sample(labels, []int64{1, int64(10 * (i + 1))}, s...)
		}
		return b
	}
	add(t, p, prof(0, []string{"hash", "work", "main"}, []string{"work", "main"}, []string{"read", "io", "main"}).Profile(), record.ProfileCPU, 0)
	add(t, p, prof(5*time.Minute, []string{"hash", "work", "main"}, []string{"write", "io", "main"}).Profile(), record.ProfileCPU, 1)
	docs := p.Pending(true)
	var tree *indices.RollupDoc
	want := map[string][2]int64{}
	all := perStack(docs)
	for i := range all {
		d := &all[i]
		if d.Resolution != indices.ResolutionHour {
			continue
		}
		switch d.Kind {
		case indices.KindTree:
			tree = d
		case indices.KindStack:
			// The brute force: each stack's frames from the partition's
			// state, its value from its document.
			w := p.windows[windowKey{indices.ResolutionHour, t0.UnixNano()}]
			frames := w.trie.appendFrames(nil, w.table.stacks[w.table.index[keyOf(t, d.StackIDs[0])]].node)
			for j := len(frames) - 1; j >= 0; j-- {
				var names []string
				for k := len(frames) - 1; k >= j; k-- {
					names = append(names, frames[k].Function)
				}
				v := want[strings.Join(names, ";")]
				v[1] += d.Value
				if j == 0 {
					v[0] += d.Value
				}
				want[strings.Join(names, ";")] = v
			}
		}
	}
	if tree == nil {
		t.Fatal("no hour tree")
	}
	got := decodeTree(t, tree.Tree)
	if len(got) != len(want) {
		t.Fatalf("tree %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: %v, want %v (tree %v)", k, got[k], v, got)
		}
	}
	if got["main"] != [2]int64{0, 90} || got["main;work"] != [2]int64{20, 40} {
		t.Fatalf("tree %v", got)
	}
	first := bytes.Clone(tree.Tree)
	MarkStored(docs)
	for i := 0; i < 3; i++ {
		// Same state, same bytes: a replay overwrites with what it held.
		again := p.treePending(p.windows[windowKey{indices.ResolutionHour, t0.UnixNano()}], t0, "x", seriesKey{indices.KindStack, "cpu", "checkout", "web-1"},
			p.windows[windowKey{indices.ResolutionHour, t0.UnixNano()}].series[seriesKey{indices.KindStack, "cpu", "checkout", "web-1"}])
		if !bytes.Equal(again.Doc.Tree, first) {
			t.Fatal("the same hour encoded to other bytes")
		}
	}
	// A late profile in the hour rewrites its tree whole, same _id.
	add(t, p, prof(7*time.Minute, []string{"write", "io", "main"}).Profile(), record.ProfileCPU, 2)
	var late *Pending
	for _, d := range p.Pending(true) {
		if d.Doc.Kind == indices.KindTree {
			late = &d
		}
	}
	if late == nil || late.Doc.Value != 100 || late.ID != indices.RollupID(tree) {
		t.Fatalf("late tree %+v, want value 100 under id %s", late, indices.RollupID(tree))
	}
	if g := decodeTree(t, late.Doc.Tree); g["main;io;write"] != [2]int64{30, 30} {
		t.Fatalf("late tree %v", g)
	}
}

// TestStackFramesChargedOnce: an hour holds its stacks' frames for its
// trees in one trie; a stack seen on a second host's hour adds nothing to
// it, and the charge goes back when the window is evicted.
func TestStackFramesChargedOnce(t *testing.T) {
	cfg := testConfig()
	cfg.Budget = &Budget{MaxBytes: 1 << 30}
	p := NewPartition(cfg, Checkpoint{})
	if _, err := p.Add(Input{Profile: cpu(t0), Type: record.ProfileCPU, Host: "web-1", Offset: 0}); err != nil {
		t.Fatal(err)
	}
	w := p.windows[windowKey{indices.ResolutionHour, t0.UnixNano()}]
	first := cfg.Budget.Used()
	nodes, frames := len(w.trie.nodes), len(w.trie.frames)
	if nodes < 2 || frames < 2 {
		t.Fatalf("trie of %d nodes, %d frames after a profile", nodes, frames)
	}
	if _, err := p.Add(Input{Profile: cpu(t0.Add(10 * time.Second)), Type: record.ProfileCPU, Host: "web-2", Offset: 1}); err != nil {
		t.Fatal(err)
	}
	if len(w.trie.nodes) != nodes || len(w.trie.frames) != frames {
		t.Fatalf("trie grew from %d nodes, %d frames to %d, %d for the same stacks on a second host", nodes, frames, len(w.trie.nodes), len(w.trie.frames))
	}
	second := cfg.Budget.Used() - first
	if second >= first {
		t.Fatalf("second host charged %d, first %d: frames charged twice", second, first)
	}
	// Everything written and far behind the watermark: all returned.
	MarkStored(p.Pending(true))
	p.watermark = t0.Add(24 * time.Hour).UnixNano()
	p.Evict()
	if len(p.windows) != 0 || cfg.Budget.Used() != p.stacks.bytes {
		t.Fatalf("%d windows left, %d bytes charged after eviction (the stack cache: %d)", len(p.windows), cfg.Budget.Used(), p.stacks.bytes)
	}
}

// TestFrameTrie: stacks read back from the trie are the stacks inserted,
// shared prefixes add only their new nodes, and cost is what insert adds.
func TestFrameTrie(t *testing.T) {
	f := func(names ...string) []indices.Frame {
		var out []indices.Frame
		for _, n := range names {
			out = append(out, indices.Frame{Function: n, File: n + ".go", Line: int64(len(n)), Binary: "bin"})
		}
		return out
	}
	// The last: the first one at other lines of another build, and a
	// frame without a function (named by its binary) of the kernel.
	moved := f("leaf", "mid", "main")
	for i := range moved {
		moved[i].Line += 100
		moved[i].Binary = "bin-v2"
	}
	kernel := []indices.Frame{{Binary: record.MappingKernel}}
	stacks := [][]indices.Frame{f("leaf", "mid", "main"), f("other", "mid", "main"), f("mid", "main"), f("main", "main"), {}, f("leaf", "mid", "main"), moved, kernel}
	tr := newFrameTrie()
	table := newFrameTable()
	nodes := make([]int32, len(stacks))
	for i, st := range stacks {
		frames, _ := table.stackFrames(st)
		want := tr.cost(frames)
		var got int64
		nodes[i], got = tr.insert(frames)
		if got != want {
			t.Errorf("stack %d: cost %d, insert added %d", i, want, got)
		}
		if (*frameTrie)(nil).cost(frames) < got {
			t.Errorf("stack %d: bound below what insert added", i)
		}
	}
	// Read back as the trees read them: the same tree frames, and the
	// same function names.
	for i, st := range stacks {
		got := tr.appendFrames(nil, nodes[i])
		if len(got) != len(st) {
			t.Fatalf("stack %d: %v, want %v", i, got, st)
		}
		for j := range st {
			if indices.TreeFrameOf(got[j]) != indices.TreeFrameOf(st[j]) || got[j].Function != st[j].Function {
				t.Errorf("stack %d frame %d: %+v, want %+v", i, j, got[j], st[j])
			}
		}
	}
	if nodes[0] != nodes[5] || nodes[0] != nodes[6] || len(tr.nodes) != 1+3+1+1+1 || len(tr.frames) != 5 {
		t.Errorf("nodes %v, %d nodes, %d frames", nodes, len(tr.nodes), len(tr.frames))
	}
	// The same stacks as frames of another table (a stack cache's after
	// it dropped its table), in another order: the same nodes, nothing
	// added.
	other := newFrameTable()
	other.stackFrames(f("x", "y"))
	for i := len(stacks) - 1; i >= 0; i-- {
		frames, _ := other.stackFrames(stacks[i])
		if cost := tr.cost(frames); cost != 0 {
			t.Errorf("stack %d of another table: cost %d, want 0", i, cost)
		}
		if node, added := tr.insertFrames(frames); node != nodes[i] || added != 0 {
			t.Errorf("stack %d of another table: node %d, added %d; want node %d, nothing", i, node, added, nodes[i])
		}
	}
}

// TestServiceTrees: an hour's service tree merges the trees of every host
// of the service in the partition, names the partition, and its _id is
// the same for the same partition, service and hour.
func TestServiceTrees(t *testing.T) {
	cfg := testConfig()
	cfg.Partition = 3
	p := NewPartition(cfg, Checkpoint{})
	for i, host := range []string{"web-1", "web-2"} {
		if _, err := p.Add(Input{Profile: cpu(t0.Add(time.Duration(i) * time.Minute)), Type: record.ProfileCPU, Host: host, Offset: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	trees := map[string]indices.RollupDoc{}
	var partition *indices.RollupDoc
	for _, d := range p.Pending(true) {
		if d.Doc.Kind == indices.KindPartitionTree {
			partition = &d.Doc
		}
		if d.Doc.Kind == indices.KindServiceTree {
			if d.ID != indices.RollupID(&d.Doc) {
				t.Fatalf("id %s", d.ID)
			}
			trees[d.Doc.Service] = d.Doc
		}
	}
	got := trees["checkout"]
	if len(trees) != 2 || got.Partition != 3 || got.Host != "" || got.Value != 80 {
		t.Fatalf("service trees %+v, want checkout's of partition 3 worth 80", trees)
	}
	if paths := decodeTree(t, got.Tree); paths["main;work"] != [2]int64{20, 80} || paths["main;work;hash"] != [2]int64{60, 60} {
		t.Fatalf("checkout's service tree %v, want both hosts' stacks", paths)
	}
	if partition == nil || partition.Partition != 3 || partition.Service != "" || partition.Value != 80+10 {
		t.Fatalf("partition tree %+v, want partition 3's worth 90", partition)
	}
	if paths := decodeTree(t, partition.Tree); paths["main"] != [2]int64{0, 90} || paths["main;serve;main"] != [2]int64{10, 10} || paths["main;work;hash"] != [2]int64{60, 60} {
		t.Fatalf("partition tree %v, want both services of both hosts", paths)
	}
	other := got
	other.Partition = 4
	if indices.RollupID(&other) == indices.RollupID(&got) {
		t.Fatal("two partitions' service trees share an _id")
	}
}

// keyOf is the stack key of a stack ID.
func keyOf(t *testing.T, id string) stackKey {
	t.Helper()
	var k stackKey
	if n, err := base64.RawURLEncoding.Decode(k[:], []byte(id)); err != nil || n != len(k) {
		t.Fatalf("stack ID %q: %d bytes, %v", id, n, err)
	}
	return k
}

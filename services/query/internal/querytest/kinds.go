package querytest

import (
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// KindFrame is a frame of KindsFixture: a function on a binary, which for
// the agent's pseudo-files (record.Mapping*) gives the frame its kind.
type KindFrame struct{ Function, Binary string }

// KindStack is one stack of KindsFixture, root first, and its value.
type KindStack struct {
	Value  int64
	Frames []KindFrame
}

// KindsStacks are the stacks of KindsFixture. Every root child has frames of
// one kind only, so a test knows where each kind is drawn: by total, native
// (400) first, then python (300), kernel (150), java (100), jit (60), js (50).
// Below main, native, Python and kernel frames mix on one stack.
var KindsStacks = []KindStack{
	{250, []KindFrame{{"main", "app"}, {"compute", "app"}}},
	{150, []KindFrame{{"main", "app"}, {"_PyEval_EvalFrameDefault", "python3.12"}, {"Handler.serve", record.MappingPython}, {"sys_read", record.MappingKernel}}},
	{300, []KindFrame{{"<module>", record.MappingPython}, {"Handler.serve", record.MappingPython}}},
	{150, []KindFrame{{"do_syscall_64", record.MappingKernel}}},
	{100, []KindFrame{{"com.example.Main.main", record.MappingJava}, {"com.example.Cart.total", record.MappingJava}}},
	{60, []KindFrame{{"LazyCompile:*loop", record.MappingJIT}}},
	{50, []KindFrame{{"(anonymous)", record.MappingJS}}},
}

// KindsFixtureTotal is the CPU total of KindsFixture over [now-1h, now).
const KindsFixtureTotal = 1060

// KindStackDoc returns the stack document of frames given root first, with
// their kinds stored the way the indexer stores them (pprofx).
func KindStackDoc(names indices.Names, t time.Time, rootFirst []KindFrame) (Doc, string) {
	frames := make([]indices.Frame, len(rootFirst))
	funcs := make([]string, 0, len(rootFirst))
	seen := map[string]bool{}
	for i, f := range rootFirst {
		fr := indices.Frame{Function: f.Function, Binary: f.Binary}
		if k := record.FrameKind(f.Binary); k != record.KindNative {
			fr.Kind = k
		}
		frames[len(rootFirst)-1-i] = fr
		if !seen[f.Function] {
			seen[f.Function] = true
			funcs = append(funcs, f.Function)
		}
	}
	id := indices.StackID(frames)
	return Doc{Index: names.Stacks(), ID: id, Body: indices.StackDoc{
		Timestamp: t, Frames: frames, Functions: funcs, Leaf: frames[0].Function, Depth: len(frames), Kinds: indices.StackKinds(frames),
	}}, id
}

// KindsFixture returns the stacks of KindsStacks with one CPU sample each,
// 10 minutes before now, for the names' indices.
func KindsFixture(names indices.Names, now time.Time) []Doc {
	at := now.UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	var docs []Doc
	var samples []indices.SampleDoc
	for _, s := range KindsStacks {
		d, id := KindStackDoc(names, at.Add(-time.Hour), s.Frames)
		docs = append(docs, d)
		samples = append(samples, indices.SampleDoc{
			Timestamp: at, Type: "cpu", Host: "poly-1", Service: "polyglot", StackIDs: []string{id}, Value: s.Value, Count: 1,
			Labels: map[string]string{"comm": "polyglot"},
		})
	}
	return append(docs, Samples(names, samples...)...)
}

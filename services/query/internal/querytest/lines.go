package querytest

import (
	"fmt"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// FrameStack returns the stack document of frames given root first, with
// every field as given and their kinds stored the way the indexer stores
// them (pprofx: from the binary, empty for native code), and its ID.
func FrameStack(names indices.Names, t time.Time, rootFirst []indices.Frame) (Doc, string) {
	frames := make([]indices.Frame, len(rootFirst))
	funcs := make([]string, 0, len(rootFirst))
	seen := map[string]bool{}
	for i, f := range rootFirst {
		if k := record.FrameKind(f.Binary); k != record.KindNative {
			f.Kind = k
		}
		frames[len(rootFirst)-1-i] = f
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

// LineStack is one stack of LinesFixture, root first, with the host it was
// sampled on and its value.
type LineStack struct {
	Host   string
	Value  int64
	Frames []indices.Frame
}

// LinesService is the service of LinesFixture's stacks and LinesWideService
// that of its LinesWideHosts one-stack hosts.
const (
	LinesService     = "demo"
	LinesWideService = "wide"
	LinesWideHosts   = 17
)

// Source lines of LinesFixture: main.work spends 300 at work.go:5 and 100
// at work.go:7, both called from main.go:8.
var (
	linesMain = indices.Frame{Function: "main.main", File: "/src/demo/main.go", Line: 8, Binary: "demo"}
	// LinesStacks are the stacks of service LinesService.
	LinesStacks = []LineStack{
		{"demo-1", 300, []indices.Frame{linesMain, {Function: "main.work", File: "/src/demo/work.go", Line: 5, Binary: "demo"}}},
		{"demo-2", 100, []indices.Frame{linesMain, {Function: "main.work", File: "/src/demo/work.go", Line: 7, Binary: "demo"}}},
		{"demo-1", 50, []indices.Frame{linesMain,
			{Function: "_PyEval_EvalFrameDefault", Binary: "libpython3.12.so.1.0"},
			{Function: "Handler.serve", File: "/srv/handler.py", Line: 30, Binary: record.MappingPython},
			{Function: "sys_read", Binary: record.MappingKernel}}},
	}
)

// LinesTotal is the CPU total of service LinesService in LinesFixture, and
// LinesWideTotal that of LinesWideService.
const (
	LinesTotal     = 450
	LinesWideTotal = LinesWideHosts * 10
)

// LinesFixture returns the stacks of LinesStacks with one CPU sample each,
// 10 minutes before now, and LinesWideHosts hosts of service
// LinesWideService with a value of 10 each on the stack of main.work at
// work.go:5.
func LinesFixture(names indices.Names, now time.Time) []Doc {
	at := now.UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	var docs []Doc
	var samples []indices.SampleDoc
	for _, s := range LinesStacks {
		d, id := FrameStack(names, at.Add(-time.Hour), s.Frames)
		docs = append(docs, d)
		samples = append(samples, indices.SampleDoc{
			Timestamp: at, Type: "cpu", Host: s.Host, Service: LinesService, StackIDs: []string{id}, Value: s.Value, Count: 1,
		})
	}
	_, id := FrameStack(names, at.Add(-time.Hour), LinesStacks[0].Frames)
	for i := range LinesWideHosts {
		samples = append(samples, indices.SampleDoc{
			Timestamp: at, Type: "cpu", Host: fmt.Sprintf("wide-%02d", i), Service: LinesWideService, StackIDs: []string{id}, Value: 10, Count: 1,
		})
	}
	return append(docs, Samples(names, samples...)...)
}

package api

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// mixedStacks are stored stacks (leaf first) mixing native frames with
// files and lines, a function on two lines, frames of the agent's
// pseudo-files, and a frame stored without a function.
var mixedStacks = map[string][]indices.Frame{
	"s1": {
		{Function: "main.compute", File: "/src/app/compute.go", Line: 12, Binary: "app"},
		{Function: "main.main", File: "/src/app/main.go", Line: 5, Binary: "app"},
	},
	"s2": {
		{Function: "main.compute", File: "/src/app/compute.go", Line: 14, Binary: "app"},
		{Function: "main.main", File: "/src/app/main.go", Line: 5, Binary: "app"},
	},
	"s3": {
		{Function: "sys_read", Binary: record.MappingKernel, Kind: record.KindKernel},
		{Function: "Handler.serve", File: "/srv/handler.py", Line: 30, Binary: record.MappingPython, Kind: record.KindPython},
		{Function: "_PyEval_EvalFrameDefault", Binary: "libpython3.12.so"},
		{Function: "main.main", File: "/src/app/main.go", Line: 5, Binary: "app"},
	},
	// Written before schema 2: no kind, which follows from the binary.
	"s4": {{Function: "com.example.Cart.total", File: "Cart.java", Line: 7, Binary: record.MappingJava}},
	"s5": {{Binary: "libc.so.6"}},
}

func TestToProfile(t *testing.T) {
	s := store.Selection{Type: record.ProfileCPU, Range: store.TimeRange{From: time.Unix(1000, 0), To: time.Unix(4600, 0)}}
	values := map[string]int64{"s1": 100, "s2": 50, "s3": 30, "s4": 20, "s5": 7, "": 3, "gone": 2}
	const total = 220 // 8 in stacks left out by MaxStacks
	tests := []struct {
		name       string
		groups     []store.LabelGroup
		wantLabels map[string]int64 // "service/host" -> value; nil: no labels
	}{
		{name: "no labels"},
		{
			name: "service and host labels",
			groups: []store.LabelGroup{
				{Labels: map[string]string{"service": "app", "host": "h1"}, Values: map[string]int64{"s1": 60, "s2": 50, "": 3}},
				{Labels: map[string]string{"service": "app", "host": "h2"}, Values: map[string]int64{"s1": 40, "s3": 30, "s4": 20, "s5": 7, "gone": 2}},
			},
			wantLabels: map[string]int64{"app/h1": 113, "app/h2": 99},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := &store.ExportValues{StackValues: store.StackValues{Values: values, Total: total, Truncated: true}, Groups: tc.groups}
			p := toProfile(ev, s, mixedStacks)
			if err := p.CheckValid(); err != nil {
				t.Fatalf("CheckValid: %v", err)
			}
			// What pprof reads back is what was built.
			var buf bytes.Buffer
			if err := p.Write(&buf); err != nil {
				t.Fatal(err)
			}
			p, err := profile.Parse(&buf)
			if err != nil {
				t.Fatalf("parse written profile: %v", err)
			}

			var sum int64
			byLabels := map[string]int64{}
			byLeaf := map[string]int64{}
			for _, smp := range p.Sample {
				sum += smp.Value[0]
				byLeaf[lineString(smp.Location[0])] += smp.Value[0]
				if tc.wantLabels != nil && smp.Label != nil {
					byLabels[smp.Label["service"][0]+"/"+smp.Label["host"][0]] += smp.Value[0]
				}
			}
			if sum != total {
				t.Errorf("profile total %d, want %d", sum, total)
			}
			wantLeaf := map[string]int64{
				"main.compute /src/app/compute.go:12 app":   100,
				"main.compute /src/app/compute.go:14 app":   50,
				"sys_read :0 [kernel.kallsyms]":             30,
				"com.example.Cart.total Cart.java:7 [java]": 20,
				"[libc.so.6] :0 libc.so.6":                  7,
				noStack + " :0 ":                            3,
				unknownStack + " :0 ":                       2,
				otherNodes + " :0 ":                         8,
			}
			if fmt.Sprint(byLeaf) != fmt.Sprint(wantLeaf) {
				t.Errorf("value by leaf\n got %v\nwant %v", byLeaf, wantLeaf)
			}
			if tc.wantLabels != nil && fmt.Sprint(byLabels) != fmt.Sprint(tc.wantLabels) {
				t.Errorf("value by service/host %v, want %v", byLabels, tc.wantLabels)
			}
			if tc.wantLabels == nil && len(byLabels) > 0 {
				t.Errorf("labels %v on an export without groups", byLabels)
			}

			var mappings []string
			for _, m := range p.Mapping {
				if !m.HasFunctions {
					t.Errorf("mapping %s: HasFunctions unset, pprof would try to symbolize it", m.File)
				}
				mappings = append(mappings, fmt.Sprintf("%s files=%t lines=%t", m.File, m.HasFilenames, m.HasLineNumbers))
			}
			slices.Sort(mappings)
			wantMappings := []string{
				"[java] files=true lines=true",
				"[kernel.kallsyms] files=false lines=false",
				"[python] files=true lines=true",
				"app files=true lines=true",
				"libc.so.6 files=false lines=false",
				"libpython3.12.so files=false lines=false",
			}
			if !slices.Equal(mappings, wantMappings) {
				t.Errorf("mappings\n got %q\nwant %q", mappings, wantMappings)
			}

			// A function per (name, file); a location per line of it.
			var functions []string
			for _, f := range p.Function {
				functions = append(functions, f.Name+" "+f.Filename)
			}
			if n := strings.Count(strings.Join(functions, "\n"), "main.compute /src/app/compute.go"); n != 1 {
				t.Errorf("main.compute is %d functions, want 1: %q", n, functions)
			}
			var computeLines, mainLocations []int64
			for _, l := range p.Location {
				if len(l.Line) != 1 {
					t.Fatalf("location %d has %d lines, want 1", l.ID, len(l.Line))
				}
				switch l.Line[0].Function.Name {
				case "main.compute":
					computeLines = append(computeLines, l.Line[0].Line)
				case "main.main":
					mainLocations = append(mainLocations, l.Line[0].Line)
				}
			}
			slices.Sort(computeLines)
			if !slices.Equal(computeLines, []int64{12, 14}) || !slices.Equal(mainLocations, []int64{5}) {
				t.Errorf("main.compute locations at lines %v (want [12 14]), main.main at %v (want [5])", computeLines, mainLocations)
			}

			// Leaf first: the Python stack reads kernel, Python, native.
			for _, smp := range p.Sample {
				if smp.Location[0].Line[0].Function.Name != "sys_read" {
					continue
				}
				var got []string
				for _, l := range smp.Location {
					got = append(got, l.Line[0].Function.Name+"@"+l.Mapping.File)
				}
				want := []string{"sys_read@[kernel.kallsyms]", "Handler.serve@[python]", "_PyEval_EvalFrameDefault@libpython3.12.so", "main.main@app"}
				if !slices.Equal(got, want) {
					t.Errorf("python stack %q, want %q", got, want)
				}
			}
			if p.SampleType[0].Type != "cpu" || p.DurationNanos != int64(time.Hour) {
				t.Errorf("sample type %v duration %d", p.SampleType[0], p.DurationNanos)
			}
		})
	}
}

// lineString is "function file:line mapping" of a location's only line.
func lineString(l *profile.Location) string {
	m := ""
	if l.Mapping != nil {
		m = l.Mapping.File
	}
	return fmt.Sprintf("%s %s:%d %s", l.Line[0].Function.Name, l.Line[0].Function.Filename, l.Line[0].Line, m)
}

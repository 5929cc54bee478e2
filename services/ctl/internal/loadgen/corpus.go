package loadgen

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
)

// corpusFS holds CPU profiles recorded by stackstream-agent on the
// development host and symbolized by stackstream-symbolizer (see
// corpus/README.md): the stack shapes every simulated host draws from.
//
//go:embed corpus/*.pb.gz
var corpusFS embed.FS

// Frame is one frame of a corpus stack, as the pipeline names it.
type Frame struct {
	Kind     string // record.Kind*: how the agent sends it
	Binary   string // mapping file of a native frame; "" when the agent had no mapping
	Function string // "" for a native frame the symbolizer could not name
	File     string // source file of frames the agent names (java, python, js)
	Line     int64
	Address  uint64 // recorded address of an unnamed native frame
	// App is true for the program's own code (its executable, interpreted
	// and JIT frames): renamed per simulated service so that services
	// differ; kernel and shared-library frames stay shared by the fleet.
	App bool
}

// Program is the stacks of one recorded service, with their sample counts.
type Program struct {
	Name   string
	Frames []Frame   // every distinct frame of the program
	Stacks [][]int32 // leaf first, indices into Frames
	Weight []int64   // samples of each stack
	cum    []int64   // running sum of Weight, for drawing
}

// Corpus is the recorded programs, heaviest first.
type Corpus struct {
	Programs []*Program
}

// minProgramSamples drops programs seen too rarely to give a service a shape.
const minProgramSamples = 3

// LoadCorpus reads the embedded corpus.
func LoadCorpus() (*Corpus, error) {
	return loadCorpus(corpusFS, "corpus")
}

func loadCorpus(fsys fs.FS, dir string) (*Corpus, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.pb.gz"))
	if err != nil || len(names) == 0 {
		return nil, fmt.Errorf("load corpus: no profiles in %s (%v)", dir, err)
	}
	type stackKey struct{ prog, frames string }
	progs := map[string]*Program{}
	frameIdx := map[string]map[Frame]int32{}
	stackIdx := map[stackKey]int{}
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("load corpus: %w", err)
		}
		p, err := record.DecodeProfile(b)
		if err != nil {
			return nil, fmt.Errorf("load corpus %s: %w", name, err)
		}
		for _, s := range p.Sample {
			if len(s.Location) == 0 || len(s.Value) < 1 || s.Value[0] <= 0 {
				continue
			}
			pname := record.DeriveService(record.Labels(s.Label))
			if pname == "" {
				pname = "unknown"
			}
			exe := record.Labels(s.Label)[record.LabelExecutable]
			prog := progs[pname]
			if prog == nil {
				prog = &Program{Name: pname}
				progs[pname] = prog
				frameIdx[pname] = map[Frame]int32{}
			}
			ids := make([]int32, 0, len(s.Location))
			var key strings.Builder
			for _, loc := range s.Location {
				f := frameOf(loc, exe)
				id, ok := frameIdx[pname][f]
				if !ok {
					id = int32(len(prog.Frames))
					prog.Frames = append(prog.Frames, f)
					frameIdx[pname][f] = id
				}
				ids = append(ids, id)
				fmt.Fprintf(&key, "%d,", id)
			}
			k := stackKey{pname, key.String()}
			if i, ok := stackIdx[k]; ok {
				prog.Weight[i] += s.Value[0]
				continue
			}
			stackIdx[k] = len(prog.Stacks)
			prog.Stacks = append(prog.Stacks, ids)
			prog.Weight = append(prog.Weight, s.Value[0])
		}
	}
	c := &Corpus{}
	for _, p := range progs {
		var total int64
		p.cum = make([]int64, len(p.Weight))
		for i, w := range p.Weight {
			total += w
			p.cum[i] = total
		}
		if total >= minProgramSamples {
			c.Programs = append(c.Programs, p)
		}
	}
	sort.Slice(c.Programs, func(i, j int) bool {
		a, b := c.Programs[i], c.Programs[j]
		if a.total() != b.total() {
			return a.total() > b.total()
		}
		return a.Name < b.Name
	})
	if len(c.Programs) == 0 {
		return nil, fmt.Errorf("load corpus: no program with %d samples or more", minProgramSamples)
	}
	return c, nil
}

func (p *Program) total() int64 { return p.cum[len(p.cum)-1] }

// frameOf turns one symbolized location into the frame the pipeline would
// show for it: a native location is one symbol (the synthetic debuginfo
// has functions, not inlining), so its outermost function names it.
func frameOf(loc *profile.Location, exe string) Frame {
	var f Frame
	if loc.Mapping != nil {
		f.Binary = loc.Mapping.File
	}
	f.Kind = record.FrameKind(f.Binary)
	if n := len(loc.Line); n > 0 && loc.Line[n-1].Function != nil {
		f.Function = loc.Line[n-1].Function.Name
		if f.Kind != record.KindNative {
			f.File = loc.Line[n-1].Function.Filename
			f.Line = loc.Line[n-1].Line
		}
	}
	switch {
	case f.Kind == record.KindKernel:
	case f.Kind != record.KindNative:
		f.App = true
	case f.Function == "":
		// Unnamed: the agent had no mapping, or the symbolizer no symbols;
		// it stays an address, without a binary to publish.
		f.Binary, f.Address = "", loc.Address
	default:
		f.App = !isSharedLibrary(f.Binary) || f.Binary == exe
	}
	return f
}

// isSharedLibrary reports whether a mapping file is a shared object
// (libc.so.6, libjvm.so): the same build on every host of the fleet.
func isSharedLibrary(file string) bool {
	base := path.Base(file)
	return strings.HasSuffix(base, ".so") || strings.Contains(base, ".so.")
}

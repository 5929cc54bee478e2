package agent

import (
	"fmt"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/agent/internal/python"
)

// unknownPythonFrame names a Python frame whose code object could not be
// read (the process exited, or the memory was not a code object).
const unknownPythonFrame = "<unknown python frame>"

type pythonLocKey struct {
	name, file string
	line       int
}

type pythonFuncKey struct {
	name, file string
	start      int
}

// pythonLocation is the location of a Python frame the BPF walker recorded
// (python.IsFrame): function co_qualname, file co_filename, the line of the
// code unit executing, under the "[python]" mapping, which the symbolizer
// passes through.
func (c *cpuProfile) pythonLocation(p *process, v uint64) *profile.Location {
	f := python.DecodeFrame(v)
	k := pythonLocKey{name: unknownPythonFrame}
	start := 0
	if c.python != nil {
		if code, err := c.python.Code(p.info.PID, f.Code); err == nil {
			k = pythonLocKey{code.Qualname, code.Filename, code.Line(f.Instr)}
			start = code.FirstLine
		}
	}
	if loc, ok := c.pyLocs[k]; ok {
		return loc
	}
	if c.pythonMap == nil {
		c.pythonMap = &profile.Mapping{ID: uint64(len(c.p.Mapping) + 1), File: record.MappingPython,
			HasFunctions: true, HasFilenames: true, HasLineNumbers: true}
		c.p.Mapping = append(c.p.Mapping, c.pythonMap)
	}
	fk := pythonFuncKey{k.name, k.file, start}
	fn, ok := c.pyFuncs[fk]
	if !ok {
		fn = &profile.Function{ID: uint64(len(c.p.Function) + 1), Name: k.name, SystemName: k.name, Filename: k.file, StartLine: int64(start)}
		c.pyFuncs[fk] = fn
		c.p.Function = append(c.p.Function, fn)
	}
	loc := &profile.Location{ID: uint64(len(c.p.Location) + 1), Mapping: c.pythonMap,
		Line: []profile.Line{{Function: fn, Line: int64(k.line)}}}
	c.pyLocs[k] = loc
	c.p.Location = append(c.p.Location, loc)
	return loc
}

// registerPython tells the BPF walker and the resolver about pid's CPython,
// or forgets it when pid runs none (any more: an exec).
func (u *unwinder) registerPython(pid int, p *python.Process) error {
	if p == nil {
		u.sampler.RemovePython(pid)
		u.python.Remove(pid)
		return nil
	}
	if err := u.sampler.SetPython(pid, p.BPF()); err != nil {
		return fmt.Errorf("register python %s of pid %d: %w", p.Version, pid, err)
	}
	u.python.Add(p)
	return nil
}

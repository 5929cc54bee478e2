package agent

import (
	"fmt"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/agent/internal/v8"
)

const (
	// unknownJSFrame names a JavaScript frame whose SharedFunctionInfo
	// could not be read (the process exited, or the memory moved on).
	unknownJSFrame = "<unknown js frame>"
	// anonymousJSFunction names a function without a name, as V8 does.
	anonymousJSFunction = "(anonymous)"
)

type jsKey struct {
	name, file string
	line       int
}

// jsLocation is the location of a JavaScript frame the BPF walker recorded
// (v8.IsFrame): the function's name, its script's name and the line the
// function starts on, under the "[js]" mapping, which the symbolizer passes
// through.
func (c *cpuProfile) jsLocation(p *process, v uint64) *profile.Location {
	k := jsKey{name: unknownJSFrame}
	if c.js != nil {
		if fn, err := c.js.Function(p.info.PID, v8.DecodeFrame(v)); err == nil {
			k = jsKey{fn.Name, fn.Script, fn.Line}
			if k.name == "" {
				k.name = anonymousJSFunction
			}
		}
	}
	if loc, ok := c.jsLocs[k]; ok {
		return loc
	}
	if c.jsMap == nil {
		c.jsMap = &profile.Mapping{ID: uint64(len(c.p.Mapping) + 1), File: record.MappingJS,
			HasFunctions: true, HasFilenames: true, HasLineNumbers: true}
		c.p.Mapping = append(c.p.Mapping, c.jsMap)
	}
	fn, ok := c.jsFuncs[k]
	if !ok {
		fn = &profile.Function{ID: uint64(len(c.p.Function) + 1), Name: k.name, SystemName: k.name, Filename: k.file, StartLine: int64(k.line)}
		c.jsFuncs[k] = fn
		c.p.Function = append(c.p.Function, fn)
	}
	loc := &profile.Location{ID: uint64(len(c.p.Location) + 1), Mapping: c.jsMap,
		Line: []profile.Line{{Function: fn, Line: int64(k.line)}}}
	c.jsLocs[k] = loc
	c.p.Location = append(c.p.Location, loc)
	return loc
}

// registerV8 tells the BPF walker and the resolver about pid's V8, or
// forgets it when pid runs none (any more: an exec).
func (u *unwinder) registerV8(pid int, p *v8.Process) error {
	if u.js == nil {
		return nil
	}
	if p == nil {
		u.sampler.RemoveV8(pid)
		u.js.Remove(pid)
		return nil
	}
	if err := u.sampler.SetV8(pid, p.BPF()); err != nil {
		return fmt.Errorf("register v8 of pid %d (%s): %w", pid, p.Path, err)
	}
	u.js.Add(p)
	return nil
}

package agent

import (
	"errors"
	"fmt"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/agent/internal/hotspot"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
)

// unknownJavaFrame names a Java frame whose Method could not be read (the
// process exited, the class was unloaded, or an interpreter frame sampled
// before its Method* was stored).
const unknownJavaFrame = "<unknown java frame>"

type javaKey struct {
	name, file string
}

// javaLocation is the location of a Java frame the BPF walker recorded
// (hotspot.IsFrame): "pkg.Class.method" and the class's source file,
// under the "[java]" mapping, which the symbolizer passes through. The
// perf map does not name these frames: the walker recorded the Method*,
// not the pc.
func (c *cpuProfile) javaLocation(p *process, v uint64) *profile.Location {
	k := javaKey{name: unknownJavaFrame}
	if c.java != nil {
		if m, err := c.java.Method(p.info.PID, hotspot.DecodeFrame(v)); err == nil {
			k = javaKey{m.Function(), m.File}
		}
	}
	return c.javaNamed(k)
}

// javaNamed is the "[java]" location of k, one per profile.
func (c *cpuProfile) javaNamed(k javaKey) *profile.Location {
	if loc, ok := c.javaLocs[k]; ok {
		return loc
	}
	if c.javaMap == nil {
		c.javaMap = &profile.Mapping{ID: uint64(len(c.p.Mapping) + 1), File: record.MappingJava,
			HasFunctions: true, HasFilenames: true}
		c.p.Mapping = append(c.p.Mapping, c.javaMap)
	}
	fn := &profile.Function{ID: uint64(len(c.p.Function) + 1), Name: k.name, SystemName: k.name, Filename: k.file}
	c.p.Function = append(c.p.Function, fn)
	loc := &profile.Location{ID: uint64(len(c.p.Location) + 1), Mapping: c.javaMap, Line: []profile.Line{{Function: fn}}}
	c.javaLocs[k] = loc
	c.p.Location = append(c.p.Location, loc)
	return loc
}

// javaStubLocation names an address in a registered JVM's code cache that
// is no Java frame (a stub, an adapter) by its blob's name, under "[java]"
// as the perf map would; nil elsewhere.
func (c *cpuProfile) javaStubLocation(p *process, pc uint64) *profile.Location {
	if c.java == nil {
		return nil
	}
	name, ok := c.java.Stub(p.info.PID, pc)
	if !ok {
		return nil
	}
	return c.javaNamed(javaKey{name: name})
}

// detectHotSpot finds pid's JVM; a JVM still starting (no code cache yet)
// is an error, so the process is registered again at its next sample. Any
// other failure leaves it to the perf map.
func (u *unwinder) detectHotSpot(pid int, maps []proc.Mapping) (*hotspot.Process, error) {
	if u.hotspot == nil {
		return nil, nil
	}
	jvm, err := u.hotspot.DetectIn(u.fs, pid, maps, u.mapFiles)
	if errors.Is(err, hotspot.ErrNotReady) {
		return nil, err
	}
	if err != nil && !errors.Is(err, hotspot.ErrNotJVM) {
		u.log.Debug("java frames left to the perf map", "pid", pid, "err", err)
	}
	return jvm, nil
}

// registerHotSpot tells the BPF walker and the resolver about pid's JVM,
// or forgets it when pid runs none (any more: an exec).
func (u *unwinder) registerHotSpot(pid int, p *hotspot.Process) error {
	if u.java == nil {
		return nil
	}
	if p == nil {
		u.sampler.RemoveHotSpot(pid)
		u.java.Remove(pid)
		return nil
	}
	if err := u.sampler.SetHotSpot(pid, p.BPF()); err != nil {
		return fmt.Errorf("register hotspot of pid %d (%s): %w", pid, p.Path, err)
	}
	u.java.Add(p)
	return nil
}

// javaNamed reports whether pid's Java frames are named from its own
// tables: the JVM is then not asked for a perf map.
func (u *unwinder) javaNamed(pid int) bool {
	return u.java != nil && u.java.Process(pid) != nil
}

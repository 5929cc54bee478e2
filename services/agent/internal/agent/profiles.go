package agent

import (
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/agent/internal/hotspot"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/python"
	"github.com/stackstream/stackstream/services/agent/internal/sampler"
	"github.com/stackstream/stackstream/services/agent/internal/v8"
)

// kernelMappingFile names the mapping of kernel frames, as perf does.
const kernelMappingFile = record.MappingKernel

// cpuProfile builds one interval's CPU profile from drained samples. User
// frames stay addresses with their mapping (file, offsets, build ID) for the
// symbolizer; kernel frames are named here from kallsyms. It returns the
// binaries whose frames it used, so their debuginfo can be published.
type cpuProfile struct {
	ps       *processes
	kallsyms *proc.Kallsyms
	p        *profile.Profile

	mappings  map[mappingKey]*profile.Mapping
	userLocs  map[locKey]*profile.Location
	kernLocs  map[uint64]*profile.Location
	functions map[string]*profile.Function
	kernelMap *profile.Mapping
	binaries  map[*binary]bool
	jit       jitLocations // perf map frames (jit.go)

	// Python frames (python.go); python nil: none are named.
	python    *python.Resolver
	pythonMap *profile.Mapping
	pyLocs    map[pythonLocKey]*profile.Location
	pyFuncs   map[pythonFuncKey]*profile.Function

	// JavaScript frames (v8.go); js nil: none are named.
	js      *v8.Resolver
	jsMap   *profile.Mapping
	jsLocs  map[jsKey]*profile.Location
	jsFuncs map[jsKey]*profile.Function

	// Java frames (hotspot.go); java nil: none are named.
	java     *hotspot.Resolver
	javaMap  *profile.Mapping
	javaLocs map[javaKey]*profile.Location
}

type mappingKey struct {
	pid   int
	start uint64
}

type locKey struct {
	m    *profile.Mapping
	addr uint64
}

func newCPUProfile(ps *processes, ks *proc.Kallsyms, start time.Time, dur time.Duration, period int64) *cpuProfile {
	return &cpuProfile{
		ps: ps, kallsyms: ks,
		p: &profile.Profile{
			SampleType:        []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
			PeriodType:        &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
			Period:            period,
			TimeNanos:         start.UnixNano(),
			DurationNanos:     dur.Nanoseconds(),
			DefaultSampleType: "cpu",
		},
		mappings:  map[mappingKey]*profile.Mapping{},
		userLocs:  map[locKey]*profile.Location{},
		kernLocs:  map[uint64]*profile.Location{},
		functions: map[string]*profile.Function{},
		binaries:  map[*binary]bool{},
		python:    ps.python,
		pyLocs:    map[pythonLocKey]*profile.Location{},
		pyFuncs:   map[pythonFuncKey]*profile.Function{},
		js:        ps.js,
		jsLocs:    map[jsKey]*profile.Location{},
		jsFuncs:   map[jsKey]*profile.Function{},
		java:      ps.java,
		javaLocs:  map[javaKey]*profile.Location{},
	}
}

// add adds the samples of one targeted process.
func (c *cpuProfile) add(p *process, s sampler.Sample) {
	locs := make([]*profile.Location, 0, len(s.Kernel)+len(s.User))
	for _, pc := range s.Kernel {
		locs = append(locs, c.kernelLocation(pc))
	}
	for _, pc := range s.User {
		if python.IsFrame(pc) {
			locs = append(locs, c.pythonLocation(p, pc))
			continue
		}
		if v8.IsFrame(pc) {
			locs = append(locs, c.jsLocation(p, pc))
			continue
		}
		if hotspot.IsFrame(pc) {
			locs = append(locs, c.javaLocation(p, pc))
			continue
		}
		locs = append(locs, c.userLocation(p, pc))
	}
	c.p.Sample = append(c.p.Sample, &profile.Sample{
		Location: locs,
		Value:    []int64{int64(s.Count), int64(s.PeriodNanos)},
		Label:    wrapLabels(p.labels),
	})
}

func wrapLabels(l map[string]string) map[string][]string {
	out := make(map[string][]string, len(l))
	for k, v := range l {
		out[k] = []string{v}
	}
	return out
}

func (c *cpuProfile) kernelLocation(pc uint64) *profile.Location {
	if loc, ok := c.kernLocs[pc]; ok {
		return loc
	}
	if c.kernelMap == nil {
		c.kernelMap = &profile.Mapping{ID: uint64(len(c.p.Mapping) + 1), File: kernelMappingFile, HasFunctions: true}
		c.p.Mapping = append(c.p.Mapping, c.kernelMap)
	}
	loc := &profile.Location{ID: uint64(len(c.p.Location) + 1), Mapping: c.kernelMap, Address: pc}
	name := ""
	if c.kallsyms != nil {
		name = c.kallsyms.Resolve(pc)
	}
	if name != "" {
		fn, ok := c.functions[name]
		if !ok {
			fn = &profile.Function{ID: uint64(len(c.p.Function) + 1), Name: name, SystemName: name}
			c.functions[name] = fn
			c.p.Function = append(c.p.Function, fn)
		}
		loc.Line = []profile.Line{{Function: fn}}
	}
	c.kernLocs[pc] = loc
	c.p.Location = append(c.p.Location, loc)
	return loc
}

func (c *cpuProfile) userLocation(p *process, pc uint64) *profile.Location {
	var pm *profile.Mapping
	m := c.ps.mappingOf(p, pc)
	if loc := c.jitLocation(p, m, pc); loc != nil {
		return loc
	}
	if m != nil {
		k := mappingKey{p.info.PID, m.Start}
		if pm = c.mappings[k]; pm == nil {
			pm = &profile.Mapping{ID: uint64(len(c.p.Mapping) + 1), Start: m.Start, Limit: m.Limit, Offset: m.Offset, File: m.Path}
			if m.file != nil {
				pm.BuildID = m.file.buildID
				if m.file.buildID != "" {
					c.binaries[m.file] = true
				}
			}
			c.mappings[k] = pm
			c.p.Mapping = append(c.p.Mapping, pm)
		}
	}
	k := locKey{pm, pc}
	if pm == nil {
		// No mapping (the process exited before its maps were read): the
		// address alone, kept apart per process.
		k.addr = pc
		k.m = c.unmapped(p.info.PID)
	}
	if loc, ok := c.userLocs[k]; ok {
		return loc
	}
	if loc := c.javaStubLocation(p, pc); loc != nil {
		c.userLocs[k] = loc
		return loc
	}
	loc := &profile.Location{ID: uint64(len(c.p.Location) + 1), Mapping: pm, Address: pc}
	c.userLocs[k] = loc
	c.p.Location = append(c.p.Location, loc)
	return loc
}

// unmapped returns a per-process key for locations without a mapping; it is
// never added to the profile.
func (c *cpuProfile) unmapped(pid int) *profile.Mapping {
	k := mappingKey{pid: pid, start: ^uint64(0)}
	m, ok := c.mappings[k]
	if !ok {
		m = &profile.Mapping{}
		c.mappings[k] = m
	}
	return m
}

// memoryProfile is the resident set size of each targeted process, one
// stack-less sample per process.
func memoryProfile(start time.Time, dur time.Duration) *profile.Profile {
	return &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "rss", Unit: "bytes"}},
		TimeNanos:     start.UnixNano(),
		DurationNanos: dur.Nanoseconds(),
	}
}

// Package pprofx turns symbolized pprof samples into the frames and values
// that the OpenSearch documents store. The indexer and the rollup both use it,
// so a stack hashes to the same indices.StackID in the stacks index and in the
// rollups.
package pprofx

import (
	"path/filepath"
	"strconv"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// LocationFrames appends the frames of one location to dst, innermost first:
// pprof lists a location's lines from the inlined callee out to the function
// it was inlined into, and each line becomes its own frame. A location without
// lines (the symbolizer could not resolve it) becomes one frame named
// binary+0xaddress, so it still says where the time went. The indexer and
// the rollup both call it: a different rule would give the same stack two IDs.
// A nil location (record.DecodeProfile refuses profiles that have one)
// becomes one frame named MissingLocation rather than a panic.
func LocationFrames(dst []indices.Frame, loc *profile.Location) []indices.Frame {
	if loc == nil {
		return append(dst, indices.Frame{Function: MissingLocation})
	}
	binary, kind := "", ""
	if loc.Mapping != nil && loc.Mapping.File != "" {
		binary = filepath.Base(loc.Mapping.File)
		// Native frames, the most, store no kind (see indices.Frame).
		if k := record.FrameKind(loc.Mapping.File); k != record.KindNative {
			kind = k
		}
	}
	if len(loc.Line) == 0 {
		return append(dst, indices.Frame{Function: UnresolvedName(loc), Binary: binary, Kind: kind})
	}
	for _, ln := range loc.Line {
		f := indices.Frame{Line: ln.Line, Binary: binary, Kind: kind}
		if ln.Function != nil {
			f.Function = ln.Function.Name
			f.File = ln.Function.Filename
		}
		if f.Function == "" {
			f.Function = "0x" + strconv.FormatUint(loc.Address, 16)
		}
		dst = append(dst, f)
	}
	return dst
}

// MissingLocation names the frame of a location a sample refers to but the
// profile does not define.
const MissingLocation = "[missing location]"

// UnresolvedName names a location that has no lines: binary+0xaddress, or
// 0xaddress without a mapped file.
func UnresolvedName(loc *profile.Location) string {
	if loc == nil {
		return MissingLocation
	}
	name := "0x" + strconv.FormatUint(loc.Address, 16)
	if loc.Mapping != nil && loc.Mapping.File != "" {
		name = filepath.Base(loc.Mapping.File) + "+" + name
	}
	return name
}

// StackFrames returns the frames of a sample, leaf first, as
// indices.StackID expects them.
func StackFrames(s *profile.Sample) []indices.Frame {
	if s == nil {
		return nil
	}
	frames := make([]indices.Frame, 0, len(s.Location))
	for _, loc := range s.Location {
		frames = LocationFrames(frames, loc)
	}
	return frames
}

// valueTypes names the sample type whose values a profile type stores, in
// order of preference.
var valueTypes = map[string][]string{
	"cpu":    {"cpu"},
	"memory": {"rss"},
	"heap":   {"inuse_space"},
	"alloc":  {"alloc_space"},
	"offcpu": {"offcpu"},
}

// ValueIndex is the index of the sample value that documents store for a
// profile of profileType: the sample type named for it (cpu, rss,
// inuse_space, alloc_space), else the profile's default sample type, else the
// last one (the pprof convention). It is -1 for a profile without sample
// types.
func ValueIndex(p *profile.Profile, profileType string) int {
	idx := len(p.SampleType) - 1
	if p.DefaultSampleType != "" {
		for i, st := range p.SampleType {
			if st != nil && st.Type == p.DefaultSampleType {
				idx = i
			}
		}
	}
	for _, want := range valueTypes[profileType] {
		for i, st := range p.SampleType {
			if st != nil && st.Type == want {
				idx = i
			}
		}
	}
	return idx
}

// CountIndex is the index of a samples/count value (how many ticks a CPU
// sample row stands for), or -1 when the profile has none.
func CountIndex(p *profile.Profile) int {
	for i, st := range p.SampleType {
		if st != nil && st.Type == "samples" && st.Unit == "count" {
			return i
		}
	}
	return -1
}

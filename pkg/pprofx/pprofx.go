// Package pprofx turns symbolized pprof samples into the frames and values
// that the OpenSearch documents store. The indexer and the rollup both use it,
// so a stack hashes to the same indices.StackID in the stacks index and in the
// rollups.
package pprofx

import (
	"fmt"
	"path/filepath"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/indices"
)

// LocationFrames appends the frames of one location to dst, innermost first:
// pprof lists a location's lines from the inlined callee out to the function
// it was inlined into, and each line becomes its own frame. A location without
// lines (the symbolizer could not resolve it) becomes one frame named
// binary+0xoffset, the file offset in its mapping, so it still says where the
// time went.
func LocationFrames(dst []indices.Frame, loc *profile.Location) []indices.Frame {
	binary := ""
	if loc.Mapping != nil && loc.Mapping.File != "" {
		binary = filepath.Base(loc.Mapping.File)
	}
	if len(loc.Line) == 0 {
		return append(dst, indices.Frame{Function: UnresolvedName(loc), Binary: binary})
	}
	for _, ln := range loc.Line {
		f := indices.Frame{Line: ln.Line, Binary: binary}
		if ln.Function != nil {
			f.Function = ln.Function.Name
			if f.Function == "" {
				f.Function = ln.Function.SystemName
			}
			f.File = ln.Function.Filename
		}
		if f.Function == "" {
			f.Function = UnresolvedName(loc)
		}
		dst = append(dst, f)
	}
	return dst
}

// UnresolvedName names a location that has no function: binary+0xoffset with
// the offset in the mapped file, or 0xaddress without a mapping.
func UnresolvedName(loc *profile.Location) string {
	m := loc.Mapping
	if m == nil || m.File == "" {
		return fmt.Sprintf("0x%x", loc.Address)
	}
	off := loc.Address
	if loc.Address >= m.Start {
		off = loc.Address - m.Start + m.Offset
	}
	return fmt.Sprintf("%s+0x%x", filepath.Base(m.File), off)
}

// StackFrames returns the frames of a sample, leaf first, as
// indices.StackID expects them.
func StackFrames(s *profile.Sample) []indices.Frame {
	frames := make([]indices.Frame, 0, len(s.Location))
	for _, loc := range s.Location {
		frames = LocationFrames(frames, loc)
	}
	return frames
}

// ValueIndex is the index of the sample value that documents store: the
// profile's default sample type when it names one, else the last sample type
// (the pprof convention; for CPU profiles that is cpu/nanoseconds). It is -1
// for a profile without sample types.
func ValueIndex(p *profile.Profile) int {
	if p.DefaultSampleType != "" {
		for i, st := range p.SampleType {
			if st.Type == p.DefaultSampleType {
				return i
			}
		}
	}
	return len(p.SampleType) - 1
}

// CountIndex is the index of a samples/count value (how many ticks a CPU
// sample row stands for), or -1 when the profile has none.
func CountIndex(p *profile.Profile) int {
	for i, st := range p.SampleType {
		if st.Type == "samples" && st.Unit == "count" {
			return i
		}
	}
	return -1
}

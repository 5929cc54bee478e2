package pyroscope

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
)

// FoldedLimits bounds what ParseFolded builds, checked as it reads.
type FoldedLimits struct {
	MaxSamples    int // distinct stacks
	MaxDepth      int // frames of one stack
	MaxFunctions  int // distinct frame names
	MaxFrameBytes int // one frame name; longer ones are cut
}

// DefaultFoldedLimits are those of record.DefaultLimits, so a folded body
// that parses also passes the record contract's limits.
func DefaultFoldedLimits() FoldedLimits {
	l := record.DefaultLimits()
	return FoldedLimits{
		MaxSamples:    l.MaxSamples,
		MaxDepth:      l.MaxLocationsPerSample,
		MaxFunctions:  l.MaxFunctions,
		MaxFrameBytes: 4096,
	}
}

// SampleSpec says what the count at the end of a folded line measures: the
// sample types of the profile and, for each, the factor the count is
// multiplied by (a CPU profile's cpu/nanoseconds is the count times the
// sampling period).
type SampleSpec struct {
	Types  []*profile.ValueType
	Factor []int64
	// Period and PeriodType of the profile (optional).
	Period     int64
	PeriodType *profile.ValueType
}

// ParseFolded reads collapsed stacks, one "root;caller;leaf 12" per line
// (the count after the last space; frame names may hold spaces), into a
// profile whose locations each carry one named function, so nothing is left
// to symbolize. Lines with a count of 0 are skipped and repeated stacks are
// summed; a body without counts above 0 gives a profile without
// samples. Its memory is bounded by l and by the size of data.
func ParseFolded(data []byte, spec SampleSpec, l FoldedLimits) (*profile.Profile, error) {
	p := &profile.Profile{SampleType: spec.Types, Period: spec.Period, PeriodType: spec.PeriodType}
	funcs := map[string]*profile.Location{}
	stacks := map[string]*profile.Sample{}
	lineNo := 0
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		lineNo++
		line = bytes.TrimRight(line, " \t\r")
		if len(line) == 0 {
			continue
		}
		sp := bytes.LastIndexAny(line, " \t")
		if sp <= 0 {
			return nil, fmt.Errorf("%w: folded line %d has no count: want \"a;b;c 12\"", ErrInvalid, lineNo)
		}
		n, err := strconv.ParseInt(string(line[sp+1:]), 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: folded line %d: count %q is not a non-negative integer", ErrInvalid, lineNo, short(string(line[sp+1:])))
		}
		if n == 0 {
			continue
		}
		stack := bytes.TrimRight(line[:sp], " \t")
		if s, ok := stacks[string(stack)]; ok {
			for i := range s.Value {
				s.Value[i] += n * spec.Factor[i]
			}
			continue
		}
		if len(stacks) == l.MaxSamples {
			return nil, fmt.Errorf("%w: folded stacks: more than %d distinct stacks", record.ErrTooLarge, l.MaxSamples)
		}
		if depth := bytes.Count(stack, []byte{';'}) + 1; depth > l.MaxDepth {
			return nil, fmt.Errorf("%w: folded line %d has %d frames, limit %d", record.ErrTooLarge, lineNo, depth, l.MaxDepth)
		}
		s := &profile.Sample{Value: make([]int64, len(spec.Types))}
		for i := range s.Value {
			s.Value[i] = n * spec.Factor[i]
		}
		// Folded lines list the root first; pprof lists the leaf first.
		for rest := stack; ; {
			i := bytes.LastIndexByte(rest, ';')
			name := rest[i+1:]
			if len(name) > l.MaxFrameBytes {
				name = []byte(record.TruncateUTF8(string(name), l.MaxFrameBytes))
			}
			loc, ok := funcs[string(name)]
			if !ok {
				if len(funcs) == l.MaxFunctions {
					return nil, fmt.Errorf("%w: folded stacks: more than %d distinct frames", record.ErrTooLarge, l.MaxFunctions)
				}
				id := uint64(len(funcs) + 1)
				fn := &profile.Function{ID: id, Name: string(name), SystemName: string(name)}
				if len(name) == 0 {
					fn.Name, fn.SystemName = "[unknown]", "[unknown]"
				}
				loc = &profile.Location{ID: id, Line: []profile.Line{{Function: fn}}}
				funcs[string(name)] = loc
				p.Function = append(p.Function, fn)
				p.Location = append(p.Location, loc)
			}
			s.Location = append(s.Location, loc)
			if i < 0 {
				break
			}
			rest = rest[:i]
		}
		stacks[string(stack)] = s
		p.Sample = append(p.Sample, s)
	}
	return p, nil
}

package pprofwire

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/pprofx"
	"github.com/stackstream/stackstream/schemas/record"
)

func encode(tb testing.TB, p *profile.Profile) []byte {
	var b bytes.Buffer
	if err := p.WriteUncompressed(&b); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// richProfile has what the readers meet: mappings with every field, inlined
// lines with columns, a function with a system name and start line, a
// location without mapping or lines, labels, comments, every scalar field.
func richProfile() *profile.Profile {
	b := pproftest.NewCPU(time.Unix(1700000000, 0), 10*time.Second)
	m := b.Mapping(0x400000, 0x500000, 0x1000, "/usr/bin/api", "b1d")
	m.HasFunctions, m.HasInlineFrames = true, true
	named := b.NamedLocation(m, 0x400010, "work", "work.go", 12)
	named.Line = append(named.Line, profile.Line{Function: named.Line[0].Function, Line: 3, Column: 9})
	named.Line[0].Function.SystemName, named.Line[0].Function.StartLine = "main.work", 10
	named.IsFolded = true
	bare := b.AddressLocation(nil, 0xdead)
	b.LocationSample(map[string]string{"service": "api", "host": "h1"}, []int64{2, 20}, named, bare)
	b.LocationSample(nil, []int64{1, 10}, bare)
	b.Sample(map[string]string{"pid": "7"}, []int64{3, 30}, "leaf", "main")
	p := b.Profile()
	p.Sample[0].NumLabel = map[string][]int64{"bytes": {4}}
	p.Comments = []string{"one", "two"}
	p.DropFrames, p.KeepFrames, p.DocURL = "drop.*", "keep", "https://example.com/doc"
	p.DefaultSampleType = "cpu"
	return p
}

// sameAsPprof reports how t differs from p, pprof's reading of the same
// protobuf, or "".
func sameAsPprof(tab *Tables, p *profile.Profile) string {
	str := func(i uint64) string { return string(tab.Strings[i]) }
	if len(tab.SampleTypes) != len(p.SampleType) || len(tab.Mappings) != len(p.Mapping) || len(tab.Locations) != len(p.Location) ||
		len(tab.Functions) != len(p.Function) || len(tab.Samples) != len(p.Sample) {
		return fmt.Sprintf("counts %d %d %d %d %d", len(tab.SampleTypes), len(tab.Mappings), len(tab.Locations), len(tab.Functions), len(tab.Samples))
	}
	if tab.TimeNanos != p.TimeNanos || str(tab.DefaultSampleType) != p.DefaultSampleType {
		return "time or default sample type"
	}
	for i, st := range tab.SampleTypes {
		if str(st.Type) != p.SampleType[i].Type || str(st.Unit) != p.SampleType[i].Unit {
			return fmt.Sprintf("sample type %d", i)
		}
	}
	for i, m := range tab.Mappings {
		want := p.Mapping[i]
		got := profile.Mapping{ID: m.ID, Start: m.Start, Limit: m.Limit, Offset: m.Offset, File: str(m.File), BuildID: str(m.BuildID),
			HasFunctions: m.HasFunctions, HasFilenames: m.HasFilenames, HasLineNumbers: m.HasLineNumbers, HasInlineFrames: m.HasInlineFrames,
			KernelRelocationSymbol: want.KernelRelocationSymbol}
		if got != *want || tab.MappingIndex(m.ID) != i {
			return fmt.Sprintf("mapping %d: %+v, pprof %+v", i, got, *want)
		}
	}
	for i, f := range tab.Functions {
		want := p.Function[i]
		got := profile.Function{ID: f.ID, Name: str(f.Name), SystemName: str(f.SystemName), Filename: str(f.Filename), StartLine: int64(f.StartLine)}
		if got != *want || tab.FunctionIndex(f.ID) != i {
			return fmt.Sprintf("function %d: %+v, pprof %+v", i, got, *want)
		}
	}
	for i := range tab.Locations {
		l, want := &tab.Locations[i], p.Location[i]
		if l.ID != want.ID || l.Address != want.Address || l.IsFolded != want.IsFolded || tab.LocationIndex(l.ID) != i ||
			(l.Mapping == 0) != (want.Mapping == nil) || want.Mapping != nil && want.Mapping.ID != l.Mapping {
			return fmt.Sprintf("location %d", i)
		}
		lines := tab.LocationLines(l)
		if len(lines) != len(want.Line) {
			return fmt.Sprintf("location %d: %d lines, pprof %d", i, len(lines), len(want.Line))
		}
		for j, ln := range lines {
			if w := want.Line[j]; w.Function.ID != ln.Function || w.Line != int64(ln.Line) || w.Column != int64(ln.Column) {
				return fmt.Sprintf("location %d line %d", i, j)
			}
		}
	}
	var s Sample
	for i, raw := range tab.Samples {
		want := p.Sample[i]
		if !tab.ReadSample(raw, &s) {
			return fmt.Sprintf("sample %d refused", i)
		}
		ids := make([]uint64, len(want.Location))
		for j, l := range want.Location {
			ids[j] = l.ID
		}
		if !slices.Equal(s.LocationIDs, ids) || !slices.Equal(s.Values, want.Value) {
			return fmt.Sprintf("sample %d: %v %v, pprof %v %v", i, s.LocationIDs, s.Values, ids, want.Value)
		}
		strs, nums := map[string][]string{}, map[string][]int64{}
		for r := s.Labels; len(r) > 0; {
			l, rest, ok := NextLabel(r)
			if !ok {
				return fmt.Sprintf("sample %d: labels %x", i, s.Labels)
			}
			r = rest
			switch {
			case l.Str != 0:
				strs[str(l.Key)] = append(strs[str(l.Key)], str(l.Str))
			case l.Num != 0 || l.NumUnit != 0:
				nums[str(l.Key)] = append(nums[str(l.Key)], int64(l.Num))
			}
		}
		if fmt.Sprint(strs) != fmt.Sprint(want.Label) && len(strs)+len(want.Label) > 0 ||
			fmt.Sprint(nums) != fmt.Sprint(want.NumLabel) && len(nums)+len(want.NumLabel) > 0 {
			return fmt.Sprintf("sample %d: labels %v %v, pprof %v %v", i, strs, nums, want.Label, want.NumLabel)
		}
	}
	return ""
}

// parse is pprof's reading of raw, as record.DecodeProfile checks it.
func parse(raw []byte) (*profile.Profile, error) {
	p, err := profile.ParseUncompressed(raw)
	if err != nil {
		return nil, err
	}
	return p, p.CheckValid()
}

// TestReadAsPprof: Read gives the tables pprof's parser gives, field by
// field, and a Tables reused for a second profile keeps nothing of the first.
func TestReadAsPprof(t *testing.T) {
	l := record.DefaultLimits()
	var tab Tables
	for _, p := range []*profile.Profile{richProfile(), pproftest.NewCPU(time.Unix(1, 0), time.Second).Sample(nil, []int64{1, 2}, "f").Profile()} {
		raw := encode(t, p)
		if err := tab.Read(raw, &l, nil); err != nil {
			t.Fatal(err)
		}
		want, err := parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if diff := sameAsPprof(&tab, want); diff != "" {
			t.Fatal(diff)
		}
		if !tab.DenseIDs() {
			t.Error("pprof's encoder's IDs read as sparse")
		}
	}
}

// TestReadVisit: visit sees every top-level field once, in order, and
// their bytes make up the protobuf.
func TestReadVisit(t *testing.T) {
	l := record.DefaultLimits()
	raw := encode(t, richProfile())
	var got []byte
	var nums []uint64
	var tab Tables
	if err := tab.Read(raw, &l, func(num uint64, start, end int) {
		got = append(got, raw[start:end]...)
		nums = append(nums, num)
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, raw) || !slices.Contains(nums, fieldComment) || !slices.Contains(nums, fieldSample) {
		t.Fatalf("visited %v", nums)
	}
}

// TestReadRefuses: what pprof refuses, what passes a limit, and what Read
// does not read as pprof does give ErrUnsupported; sparse IDs are read.
func TestReadRefuses(t *testing.T) {
	good := encode(t, richProfile())
	withProfile := func(change func(*profile.Profile)) []byte {
		p := richProfile()
		change(p)
		return encode(t, p)
	}
	limit := func(change func(*record.Limits)) record.Limits {
		l := record.DefaultLimits()
		change(&l)
		return l
	}
	plus := func(extra ...byte) []byte { return append(slices.Clone(good), extra...) }
	def := record.DefaultLimits()
	for _, tc := range []struct {
		name string
		raw  []byte
		l    record.Limits
	}{
		{"empty", nil, def},
		{"truncated", good[:len(good)-3], def},
		{"no string table", fieldsOf(t, good, func(num uint64) bool { return num != fieldStringTable }), def},
		{"first string not empty", append([]byte{0x32, 1, 'x'}, good...), def},
		{"unknown top-level field", plus(0xf8, 0x01, 0x01), def},
		{"fixed64 field", plus(0x49, 1, 2, 3, 4, 5, 6, 7, 8), def},
		{"two time_nanos", plus(0x48, 0x05), def},
		{"two period types", plus(0x5a, 0x04, 0x08, 0x00, 0x10, 0x00), def},
		{"string index past the table", plus(0x70, 0x7f), def},
		{"duplicate location ID", withProfile(func(p *profile.Profile) { p.Location[1].ID = p.Location[0].ID }), def},
		{"zero function ID", withProfile(func(p *profile.Profile) { p.Function[0].ID = 0 }), def},
		{"line without function", withProfile(func(p *profile.Profile) { p.Location[0].Line[0].Function = &profile.Function{ID: 99} }), def},
		{"missing mapping", withProfile(func(p *profile.Profile) { p.Location[0].Mapping = &profile.Mapping{ID: 99} }), def},
		{"sample types", good, limit(func(l *record.Limits) { l.MaxSampleTypes = 1 })},
		{"samples", good, limit(func(l *record.Limits) { l.MaxSamples = 2 })},
		{"mappings", good, limit(func(l *record.Limits) { l.MaxMappings = 0 })},
		{"locations", good, limit(func(l *record.Limits) { l.MaxLocations = 1 })},
		{"functions", good, limit(func(l *record.Limits) { l.MaxFunctions = 1 })},
		{"lines", good, limit(func(l *record.Limits) { l.MaxLines = 2 })},
		{"strings", good, limit(func(l *record.Limits) { l.MaxStrings = 3 })},
		{"string bytes", good, limit(func(l *record.Limits) { l.MaxStringBytes = 3 })},
		{"comments", good, limit(func(l *record.Limits) { l.MaxComments = 1 })},
		{"packed comments", plus(append([]byte{0x6a, 0x90, 0x4e}, make([]byte, 10000)...)...), def},
		{"decode heap (Check)", good, limit(func(l *record.Limits) { l.MaxDecodeHeapBytes = 1 })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tab Tables
			if err := tab.Read(tc.raw, &tc.l, nil); err != ErrUnsupported {
				t.Fatalf("Read: %v", err)
			}
		})
	}
	t.Run("sparse IDs", func(t *testing.T) {
		raw := withProfile(func(p *profile.Profile) { p.Location[0].ID = 1 << 40 })
		var tab Tables
		if err := tab.Read(raw, &def, nil); err != nil || tab.DenseIDs() || tab.LocationIndex(1<<40) != 0 {
			t.Fatalf("Read: %v, dense %v", err, tab.DenseIDs())
		}
	})
}

// TestReadSampleRefuses: a sample past a limit on one sample, or whose
// value count is not the sample types', is refused.
func TestReadSampleRefuses(t *testing.T) {
	raw := encode(t, richProfile())
	for name, change := range map[string]func(*record.Limits, *Tables){
		"locations":   func(l *record.Limits, _ *Tables) { l.MaxLocationsPerSample = 1 },
		"labels":      func(l *record.Limits, _ *Tables) { l.MaxLabelsPerSample = 2 },
		"value count": func(_ *record.Limits, tab *Tables) { tab.SampleTypes = tab.SampleTypes[:1] },
	} {
		t.Run(name, func(t *testing.T) {
			l := record.DefaultLimits()
			var tab Tables
			if err := tab.Read(raw, &l, nil); err != nil {
				t.Fatal(err)
			}
			change(&l, &tab)
			var s Sample
			if tab.ReadSample(tab.Samples[0], &s) {
				t.Fatal("accepted")
			}
		})
	}
}

// TestReadSampleLabelsApart: label fields apart (another field between
// them) read as the same bytes as together.
func TestReadSampleLabelsApart(t *testing.T) {
	l := record.DefaultLimits()
	var tab Tables
	if err := tab.Read(encode(t, richProfile()), &l, nil); err != nil {
		t.Fatal(err)
	}
	var together, apart Sample
	if !tab.ReadSample(tab.Samples[0], &together) {
		t.Fatal("refused")
	}
	first, _, _ := NextLabel(together.Labels)
	_, rest, _ := NextLabel(together.Labels)
	firstField := together.Labels[:len(together.Labels)-len(rest)]
	// The sample without labels, then one label, a value, the others.
	var msg []byte
	for r := tab.Samples[0]; len(r) > 0; {
		num, _, _, _, next, _ := Field(r)
		if num != fieldSampleLabel {
			msg = append(msg, r[:len(r)-len(next)]...)
		}
		r = next
	}
	msg = append(msg, firstField...)
	msg = append(msg, 0x10, 0x00) // a value, and one value too many: dropped below
	tab.SampleTypes = append(tab.SampleTypes, ValueType{})
	msg = append(msg, rest...)
	if !tab.ReadSample(msg, &apart) {
		t.Fatal("refused apart")
	}
	if !bytes.Equal(apart.Labels, together.Labels) || first.Key == 0 {
		t.Fatalf("apart %x, together %x", apart.Labels, together.Labels)
	}
}

// fieldsOf is raw with only the top-level fields keep accepts.
func fieldsOf(t *testing.T, raw []byte, keep func(uint64) bool) []byte {
	var out []byte
	for b := raw; len(b) > 0; {
		num, _, _, _, rest, ok := Field(b)
		if !ok {
			t.Fatal("bad test input")
		}
		if keep(num) {
			out = append(out, b[:len(b)-len(rest)]...)
		}
		b = rest
	}
	return out
}

// FuzzRead: whatever Read and ReadSample accept, google/pprof's parser and
// CheckValid accept too, and read the same tables; nothing panics. The
// Tables is reused, as the consumers reuse theirs.
func FuzzRead(f *testing.F) {
	f.Add(encode(f, richProfile()))
	f.Add(encode(f, pproftest.NewCPU(time.Unix(1, 0), time.Second).Sample(nil, []int64{1, 2}, "f").Profile()))
	f.Add([]byte{0x32, 0})
	var tab Tables
	f.Fuzz(func(t *testing.T, raw []byte) {
		l := record.DefaultLimits()
		l.MaxDecompressedBytes = 1 << 20
		l.MaxDecodeHeapBytes = 16 << 20
		if tab.Read(raw, &l, nil) != nil {
			return
		}
		var s Sample
		for _, smp := range tab.Samples {
			if !tab.ReadSample(smp, &s) {
				return
			}
			for _, id := range s.LocationIDs {
				if tab.LocationIndex(id) < 0 {
					return
				}
			}
			for r := s.Labels; len(r) > 0; {
				lb, rest, ok := NextLabel(r)
				if !ok || !tab.ValidString(lb.Key) || !tab.ValidString(lb.Str) || !tab.ValidString(lb.NumUnit) {
					return
				}
				r = rest
			}
		}
		want, err := parse(raw)
		if err != nil {
			t.Fatalf("Read accepted what pprof refuses: %v", err)
		}
		if diff := sameAsPprof(&tab, want); diff != "" {
			t.Fatal(diff)
		}
	})
}

// TestFrames: the frames of every location of the tables are pprofx's of
// pprof's location.
func TestFrames(t *testing.T) {
	l := record.DefaultLimits()
	raw := encode(t, richProfile())
	var tab Tables
	if err := tab.Read(raw, &l, nil); err != nil {
		t.Fatal(err)
	}
	want, err := parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	var f Frames
	for i := range tab.Locations {
		got := f.Append(nil, &tab, &tab.Locations[i])
		if w := pprofx.LocationFrames(nil, want.Location[i]); !slices.Equal(got, w) {
			t.Errorf("location %d: %v, pprofx %v", i, got, w)
		}
	}
}

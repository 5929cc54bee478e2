package symbolize

import (
	"context"
	"debug/elf"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/symbolizer/internal/source"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symtab"
	"github.com/stackstream/stackstream/services/symbolizer/internal/testbin"
)

// The benchmark corpus is the machine's own binaries: glibc's separate debug
// files (DWARF with inlines, Debian's libc6-dbg in /usr/lib/debug), the Go
// toolchain's binaries (pclntab), and large shared libraries (ELF dynamic
// symbols, no line info). Profiles sample deep stacks across processes that
// each map several of them.

type benchBinary struct {
	path    string
	buildID string
	exec    elf.ProgHeader
	funcs   [][2]uint64 // addr, size of functions to sample from
	isPIE   bool
}

var (
	corpusOnce sync.Once
	corpusBins []*benchBinary
)

func loadBinary(path string, needExec bool) *benchBinary {
	ef, err := elf.Open(path)
	if err != nil {
		return nil
	}
	defer ef.Close()
	id, err := testbin.BuildID(ef)
	if err != nil {
		return nil
	}
	b := &benchBinary{path: path, buildID: id, isPIE: ef.Type == elf.ET_DYN}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			b.exec = p.ProgHeader
			break
		}
	}
	if b.exec.Memsz == 0 || (needExec && b.exec.Filesz == 0) {
		return nil
	}
	syms, _ := ef.Symbols()
	if len(syms) == 0 {
		syms, _ = ef.DynamicSymbols()
	}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size >= 8 && s.Value >= b.exec.Vaddr && s.Value+s.Size <= b.exec.Vaddr+b.exec.Memsz {
			b.funcs = append(b.funcs, [2]uint64{s.Value, s.Size})
		}
	}
	if len(b.funcs) < 20 {
		return nil
	}
	sort.Slice(b.funcs, func(i, j int) bool { return b.funcs[i][0] < b.funcs[j][0] })
	return b
}

func benchCorpus(b *testing.B) []*benchBinary {
	corpusOnce.Do(func() {
		seen := map[string]bool{}
		add := func(bin *benchBinary) {
			if bin != nil && !seen[bin.buildID] {
				seen[bin.buildID] = true
				corpusBins = append(corpusBins, bin)
			}
		}
		debugFiles, _ := filepath.Glob("/usr/lib/debug/.build-id/*/*.debug")
		sort.Slice(debugFiles, func(i, j int) bool { return size(debugFiles[i]) > size(debugFiles[j]) })
		for _, f := range debugFiles[:min(len(debugFiles), 40)] {
			add(loadBinary(f, false))
		}
		tools, _ := filepath.Glob(filepath.Join(runtime.GOROOT(), "pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH, "*"))
		for _, f := range tools {
			add(loadBinary(f, true))
		}
		for _, lib := range []string{"libLLVM-15.so.1", "libpython3.11.so.1.0", "libcrypto.so.3", "libperl.so.5.36.0", "libstdc++.so.6",
			"libz3.so.4", "libicui18n.so.72.1", "libgtk-3.so.0", "libsqlite3.so.0", "libssl.so.3", "libxml2.so.2", "libglib-2.0.so.0"} {
			add(loadBinary(filepath.Join("/usr/lib/x86_64-linux-gnu", lib), true))
		}
	})
	if len(corpusBins) < 10 {
		b.Skipf("only %d usable binaries on this machine", len(corpusBins))
	}
	return corpusBins
}

func size(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// fileSource loads tables straight from the corpus files by build ID.
type fileSource map[string]string

func (fileSource) Name() string { return "local" }
func (s fileSource) Fetch(_ context.Context, id string) (*symtab.Table, error) {
	f, err := os.Open(s[id])
	if err != nil {
		return nil, source.ErrNotFound
	}
	defer f.Close()
	return symtab.FromELF(f, id, "local")
}

// benchProfiles builds n raw CPU profiles. Each has 8 processes mapping 5
// binaries; every sample is a stack of 24 to 64 frames, drawn with a skew
// toward hot functions, as real CPU profiles are.
func benchProfiles(bins []*benchBinary, n int) []*profile.Profile {
	rng := rand.New(rand.NewPCG(1, 2))
	var out []*profile.Profile
	for pi := 0; pi < n; pi++ {
		p := &profile.Profile{
			SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
			PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, Period: 1,
			TimeNanos: time.Unix(1700000000, 0).UnixNano(), DurationNanos: int64(10 * time.Second),
		}
		locs := map[uint64]*profile.Location{}
		for proc := 0; proc < 8; proc++ {
			type mapped struct {
				bin  *benchBinary
				m    *profile.Mapping
				base uint64
			}
			var ms []mapped
			for k := 0; k < 5; k++ {
				bin := bins[rng.IntN(len(bins))]
				base := uint64(0)
				if bin.isPIE {
					base = 0x7f0000000000 + uint64(proc)<<36 + uint64(k)<<32
				}
				start := base + bin.exec.Vaddr&^4095
				m := &profile.Mapping{ID: uint64(len(p.Mapping) + 1), Start: start,
					Limit: (base + bin.exec.Vaddr + bin.exec.Memsz + 4095) &^ 4095, Offset: bin.exec.Off &^ 4095,
					File: bin.path, BuildID: bin.buildID}
				p.Mapping = append(p.Mapping, m)
				ms = append(ms, mapped{bin, m, base})
			}
			for s := 0; s < 60; s++ {
				depth := 24 + rng.IntN(41)
				smp := &profile.Sample{Value: []int64{1, 10_000_000}, Label: map[string][]string{"pid": {"1"}}}
				for d := 0; d < depth; d++ {
					mp := ms[rng.IntN(len(ms))]
					// Hot functions: the square skews toward the first few hundred.
					f := mp.bin.funcs[int(float64(len(mp.bin.funcs))*pow2(rng.Float64()))%len(mp.bin.funcs)]
					// Never a function's first byte: callers hold return addresses.
					vaddr := f[0] + 1 + uint64(rng.IntN(int(min(f[1]-1, 63))))
					addr := mp.m.Start + (vaddr - mp.bin.exec.Vaddr&^4095)
					loc, ok := locs[addr]
					if !ok {
						loc = &profile.Location{ID: uint64(len(p.Location) + 1), Address: addr, Mapping: mp.m}
						p.Location = append(p.Location, loc)
						locs[addr] = loc
					}
					smp.Location = append(smp.Location, loc)
				}
				p.Sample = append(p.Sample, smp)
			}
		}
		out = append(out, p)
	}
	return out
}

func pow2(x float64) float64 { return x * x * x * x }

func reset(p *profile.Profile) {
	for _, l := range p.Location {
		l.Line = nil
	}
	p.Function = nil
	for _, m := range p.Mapping {
		m.HasFunctions, m.HasFilenames, m.HasLineNumbers, m.HasInlineFrames = false, false, false, false
	}
}

// BenchmarkSymbolizeWarm is the symbolizer's steady state: tables loaded,
// address caches warm. frames/s counts locations resolved (each distinct
// address of a profile is resolved once); stack-frames/s counts frames of
// all samples, the work a per-frame symbolizer would do.
// warmState is the loaded corpus, shared by the benchmark's runs (the
// testing package calls a benchmark several times with growing b.N).
type warmState struct {
	s              *Symbolizer
	profiles       []*profile.Profile
	binHit, binMis int
}

var (
	warmOnce sync.Once
	warm     *warmState
)

func BenchmarkSymbolizeWarm(b *testing.B) {
	bins := benchCorpus(b)
	ctx := context.Background()
	warmOnce.Do(func() {
		files := fileSource{}
		for _, bin := range bins {
			files[bin.buildID] = bin.path
		}
		w := &warmState{}
		chain := source.NewChain(source.Options{MaxTables: 1024, MissTTL: time.Hour,
			Metrics: source.Metrics{CacheHit: func() { w.binHit++ }, CacheMiss: func() { w.binMis++ }}}, files)
		w.s = &Symbolizer{Tables: chain}
		w.profiles = benchProfiles(bins, 32)
		loadStart := time.Now()
		var st Stats
		for _, p := range w.profiles {
			st.Add(w.s.Profile(ctx, p))
		}
		b.Logf("corpus: %d binaries, %d profiles; cold pass (loading tables) %s; resolved %v, unresolved %d",
			len(bins), len(w.profiles), time.Since(loadStart).Round(time.Millisecond), st.Resolved, st.Unresolved)
		warm = w
	})
	s, profiles := warm.s, warm.profiles
	warm.binHit, warm.binMis = 0, 0

	var frames, stackFrames int
	var st Stats
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := profiles[i%len(profiles)]
		b.StopTimer()
		reset(p)
		b.StartTimer()
		st.Add(s.Profile(ctx, p))
		frames += len(p.Location)
		for _, smp := range p.Sample {
			stackFrames += len(smp.Location)
		}
	}
	sec := b.Elapsed().Seconds()
	cpu := (cpuTime() - cpu0).Seconds()
	b.ReportMetric(float64(frames)/sec, "frames/s")
	b.ReportMetric(float64(stackFrames)/sec, "stack-frames/s")
	// On a shared machine wall time includes waiting for a core; CPU time
	// of the process (GC included) is the per-core figure.
	b.ReportMetric(float64(frames)/cpu, "frames/cpu-s")
	if st.AddrLookups > 0 {
		b.ReportMetric(float64(st.AddrHits)/float64(st.AddrLookups), "addr-cache-hit")
	}
	if n := warm.binHit + warm.binMis; n > 0 {
		b.ReportMetric(float64(warm.binHit)/float64(n), "bin-cache-hit")
	}
	if st.Unresolved > frames/10 {
		b.Fatalf("%d of %d frames unresolved: corpus addresses are wrong", st.Unresolved, frames)
	}
}

// BenchmarkProcessRecord is one raw record end to end in the process:
// gunzip and parse pprof, symbolize (warm), serialize and gzip.
func BenchmarkProcessRecord(b *testing.B) {
	bins := benchCorpus(b)
	files := fileSource{}
	for _, bin := range bins {
		files[bin.buildID] = bin.path
	}
	chain := source.NewChain(source.Options{MaxTables: 1024, MissTTL: time.Hour}, files)
	s := &Symbolizer{Tables: chain}
	profiles := benchProfiles(bins, 8)
	ctx := context.Background()
	var values [][]byte
	var locs int
	for _, p := range profiles {
		v, err := record.EncodeProfile(p)
		if err != nil {
			b.Fatal(err)
		}
		values = append(values, v)
		s.Profile(ctx, p) // warm
		locs += len(p.Location)
	}
	meta := record.Meta{Type: record.ProfileCPU, Host: "h"}
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Value: v, Headers: meta.Headers()}
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	var frames int
	for i := 0; i < b.N; i++ {
		r := recs[i%len(recs)]
		p, err := record.DecodeProfile(r.Value)
		if err != nil {
			b.Fatal(err)
		}
		s.Profile(ctx, p)
		if _, err := record.EncodeProfile(p); err != nil {
			b.Fatal(err)
		}
		frames += len(p.Location)
	}
	b.ReportMetric(float64(frames)/b.Elapsed().Seconds(), "frames/s")
	b.ReportMetric(float64(frames)/(cpuTime()-cpu0).Seconds(), "frames/cpu-s")
	b.ReportMetric(float64(locs)/float64(len(profiles)), "frames/profile")
}

// cpuTime is the user and system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLoadTable is the cold path: building the table of one binary
// when its first frame arrives (DWARF with inline trees, Go pclntab, ELF
// dynamic symbols).
func BenchmarkLoadTable(b *testing.B) {
	debugFiles, _ := filepath.Glob("/usr/lib/debug/.build-id/*/*.debug")
	sort.Slice(debugFiles, func(i, j int) bool { return size(debugFiles[i]) > size(debugFiles[j]) })
	cases := []struct{ name, path string }{
		{"glibc-debug-dwarf", ""},
		{"go-compile-pclntab", filepath.Join(runtime.GOROOT(), "pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH, "compile")},
		{"libLLVM-dynsym", "/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1"},
	}
	if len(debugFiles) > 0 {
		cases[0].path = debugFiles[0]
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if c.path == "" || size(c.path) == 0 {
				b.Skipf("%s not on this machine", c.name)
			}
			b.SetBytes(size(c.path))
			cpu0 := cpuTime()
			defer func() {
				b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
			}()
			for i := 0; i < b.N; i++ {
				f, err := os.Open(c.path)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := symtab.FromELF(f, "ab", "local"); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}

package loadgen

import (
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	"github.com/google/pprof/profile"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/schemas/record"
)

// Host is one simulated agent. Its methods are not safe for concurrent use:
// one goroutine generates a host's intervals, in order.
type Host struct {
	ID    string
	Phase time.Duration // offset of its flushes within the interval, as agents start at different times

	f       *Fleet
	rng     *rand.Rand
	procs   []*process
	cum     []float64 // running sum of the processes' CPU shares
	nextPID int
}

type process struct {
	service int // index into the fleet's catalogue
	pid     int
	pod     int
	rss     int64
	libBase map[string]uint64 // where each shared library is mapped (ASLR)
	labels  map[string][]string
}

// Host returns simulated host i (0-based) of the fleet, in its initial state.
func (f *Fleet) Host(i int) *Host {
	cfg := f.cfg
	h := &Host{
		ID:      fmt.Sprintf("%sh%06d", cfg.HostPrefix, i),
		f:       f,
		rng:     rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(i)+1)),
		nextPID: 1000,
	}
	h.Phase = time.Duration(h.rng.Int64N(int64(cfg.Interval)))
	group := i / cfg.Replicas
	n := len(f.services)
	total := 0.0
	for k := 0; k < cfg.Services; k++ {
		p := &process{service: (group*cfg.Services + k) % n}
		h.start(p)
		h.procs = append(h.procs, p)
		// Zipf-like shares: one service takes most of a host's CPU.
		total += 1 / float64(1+(k+i)%cfg.Services)
		h.cum = append(h.cum, total)
	}
	return h
}

// start (re)starts process p: a new pid, pod and address layout.
func (h *Host) start(p *process) {
	h.nextPID++
	p.pid = h.nextPID
	p.pod = h.rng.IntN(h.f.cfg.LabelValues)
	p.rss = 50<<20 + h.rng.Int64N(2<<30)
	p.libBase = map[string]uint64{}
	name := h.f.services[p.service].name
	prog := h.f.services[p.service].prog.Name
	p.labels = map[string][]string{
		record.LabelPID:          {strconv.Itoa(p.pid)},
		record.LabelComm:         {record.TruncateUTF8(prog, 15)},
		record.LabelExecutable:   {"/opt/" + name + "/bin/" + prog},
		record.LabelK8sNamespace: {"loadgen"},
		record.LabelK8sPod:       {name + "-" + strconv.Itoa(p.pod)},
		record.LabelK8sContainer: {name},
		record.LabelService:      {name},
	}
}

// Batch is what a host publishes for one interval.
type Batch struct {
	Host     string
	CPU      []byte    // gzip pprof, record.ProfileCPU
	Memory   []byte    // gzip pprof, record.ProfileMemory
	Binaries []*Binary // builds the CPU profile names: their debuginfo must be on the topic first
	Samples  int64     // raw samples in the CPU profile
	CPUNanos int64     // CPU time in the CPU profile
	RSSBytes int64     // sum of the memory profile
	Stacks   int       // distinct (process, stack) samples of the CPU profile
	NewStack int       // stacks the fleet had not produced before
}

// maxRecordBytes is the agent's bound of one profile record (Kafka's default
// max.message.bytes is 1 MiB); the agent splits larger intervals, loadgen's
// bounded flags keep under it.
const maxRecordBytes = 900 << 10

// ErrTooLarge: an interval's profile does not fit one record.
var ErrTooLarge = errors.New("profile record too large")

// Next generates the interval flushed at t.
func (h *Host) Next(t time.Time) (*Batch, error) {
	cfg := h.f.cfg
	h.churn()
	counts, order := h.draw()
	b := &Batch{Host: h.ID}
	p, err := h.cpuProfile(t, counts, order, b)
	if err != nil {
		return nil, err
	}
	if b.CPU, err = record.EncodeProfileLevel(p, gzip.BestSpeed); err != nil {
		return nil, err
	}
	if len(b.CPU) > maxRecordBytes {
		return nil, fmt.Errorf("%w: host %s: %d bytes over %d: lower --cores, --rate or --interval", ErrTooLarge, h.ID, len(b.CPU), maxRecordBytes)
	}
	mem := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "rss", Unit: "bytes"}},
		TimeNanos:     t.Add(-cfg.Interval).UnixNano(),
		DurationNanos: int64(cfg.Interval),
	}
	for _, pr := range h.procs {
		// RSS wanders by up to 1% an interval.
		pr.rss += (h.rng.Int64N(pr.rss/50+1) - pr.rss/100)
		mem.Sample = append(mem.Sample, &profile.Sample{Value: []int64{pr.rss}, Label: pr.labels})
		b.RSSBytes += pr.rss
	}
	if b.Memory, err = record.EncodeProfileLevel(mem, gzip.BestSpeed); err != nil {
		return nil, err
	}
	return b, nil
}

// churn restarts processes: Churn restarts per host per minute on average.
func (h *Host) churn() {
	cfg := h.f.cfg
	p := cfg.Churn * cfg.Interval.Minutes() / float64(len(h.procs))
	for _, pr := range h.procs {
		if h.rng.Float64() < p {
			h.start(pr)
		}
	}
}

type sampleKey struct {
	proc  int
	stack string // frame indices, 4 bytes each, leaf first
}

// draw picks the interval's raw samples: a process by its CPU share, a
// stack by its corpus weight, varied with probability Mutate (a frame
// repeated: recursion depth differs from host to host).
func (h *Host) draw() (map[sampleKey]int64, []sampleKey) {
	cfg := h.f.cfg
	counts := map[sampleKey]int64{}
	var order []sampleKey
	buf := make([]byte, 0, 4*160)
	n := cfg.SamplesPerProfile()
	for range n {
		pi := sort.SearchFloat64s(h.cum, h.rng.Float64()*h.cum[len(h.cum)-1])
		prog := h.f.services[h.procs[pi].service].prog
		stack := prog.Stacks[pickStack(prog, h.rng)]
		buf = buf[:0]
		pos, rep := -1, 0
		if len(stack) > 2 && h.rng.Float64() < cfg.Mutate {
			pos, rep = 1+h.rng.IntN(len(stack)-2), 1+h.rng.IntN(3)
		}
		for i, id := range stack {
			for r := 0; r <= rep && (r == 0 || i == pos); r++ {
				buf = binary.LittleEndian.AppendUint32(buf, uint32(id))
			}
		}
		k := sampleKey{pi, string(buf)}
		if _, ok := counts[k]; !ok {
			order = append(order, k)
		}
		counts[k]++
	}
	return counts, order
}

func pickStack(p *Program, rng *rand.Rand) int {
	x := rng.Int64N(p.total())
	return sort.Search(len(p.cum), func(i int) bool { return p.cum[i] > x })
}

type pseudoKey struct {
	kind, name, file string
	line             int64
}

type nativeKey struct {
	proc int
	bin  *Binary
}

type locKey struct {
	m    *profile.Mapping
	addr uint64
}

// cpuProfile builds the profile the agent would send: native frames as
// addresses in mappings with build IDs (named later by the symbolizer from
// the debuginfo of b.Binaries), kernel, interpreted and JIT frames named
// under their pseudo-mappings (schemas/record/frames.go).
func (h *Host) cpuProfile(t time.Time, counts map[sampleKey]int64, order []sampleKey, b *Batch) (*profile.Profile, error) {
	cfg := h.f.cfg
	period := cfg.Period()
	p := &profile.Profile{
		SampleType:        []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType:        &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:            period,
		TimeNanos:         t.Add(-cfg.Interval).UnixNano(),
		DurationNanos:     int64(cfg.Interval),
		DefaultSampleType: "cpu",
	}
	pseudoMaps := map[string]*profile.Mapping{}
	nativeMaps := map[nativeKey]*profile.Mapping{}
	pseudoLocs := map[pseudoKey]*profile.Location{}
	locs := map[locKey]*profile.Location{}
	funcs := map[[2]string]*profile.Function{}
	binaries := map[*Binary]bool{}
	versions := make([]int, len(h.procs))
	names := make([][]string, len(h.procs)) // per process and frame, computed once a batch
	for i, pr := range h.procs {
		versions[i] = h.f.version(pr.service, t)
		names[i] = make([]string, len(h.f.services[pr.service].prog.Frames))
	}
	function := func(name, file string) *profile.Function {
		fn := funcs[[2]string{name, file}]
		if fn == nil {
			fn = &profile.Function{ID: uint64(len(p.Function) + 1), Name: name, SystemName: name, Filename: file}
			p.Function = append(p.Function, fn)
			funcs[[2]string{name, file}] = fn
		}
		return fn
	}
	newLocation := func(m *profile.Mapping, addr uint64) *profile.Location {
		loc := &profile.Location{ID: uint64(len(p.Location) + 1), Mapping: m, Address: addr}
		p.Location = append(p.Location, loc)
		return loc
	}
	hashes := make([]uint64, 0, len(order))
	hh := fnv.New64a()
	for _, k := range order {
		pr := h.procs[k.proc]
		prog := h.f.services[pr.service].prog
		n := counts[k]
		s := &profile.Sample{Value: []int64{n, n * period}, Label: pr.labels}
		hh.Reset()
		for i := 0; i < len(k.stack); i += 4 {
			id := binary.LittleEndian.Uint32([]byte(k.stack[i:]))
			fr := &prog.Frames[id]
			name := names[k.proc][id]
			if name == "" {
				name = h.f.functionName(pr.service, versions[k.proc], fr)
				names[k.proc][id] = name
			}
			var loc *profile.Location
			switch {
			case fr.Kind != record.KindNative:
				pk := pseudoKey{fr.Kind, name, fr.File, fr.Line}
				if loc = pseudoLocs[pk]; loc == nil {
					m := pseudoMaps[fr.Binary]
					if m == nil {
						m = &profile.Mapping{ID: uint64(len(p.Mapping) + 1), File: fr.Binary, HasFunctions: true,
							HasFilenames: fr.Kind != record.KindKernel, HasLineNumbers: fr.Kind == record.KindPython || fr.Kind == record.KindJS}
						p.Mapping = append(p.Mapping, m)
						pseudoMaps[fr.Binary] = m
					}
					loc = newLocation(m, uint64(len(pseudoLocs)+1))
					loc.Line = []profile.Line{{Function: function(name, fr.File), Line: fr.Line}}
					pseudoLocs[pk] = loc
				}
				hashStrings(hh, fr.Kind, name, fr.File)
			case fr.Function == "":
				lk := locKey{nil, fr.Address}
				if loc = locs[lk]; loc == nil {
					loc = newLocation(nil, fr.Address)
					locs[lk] = loc
				}
				hh.Write(binary.LittleEndian.AppendUint64(nil, fr.Address))
				hh.Write([]byte{0})
			default:
				bin, err := h.f.binary(pr.service, versions[k.proc], fr)
				if err != nil {
					return nil, err
				}
				binaries[bin] = true
				nk := nativeKey{k.proc, bin}
				m := nativeMaps[nk]
				if m == nil {
					start := uint64(execBase)
					if !fr.App {
						start = h.libBase(pr, bin)
					}
					m = &profile.Mapping{ID: uint64(len(p.Mapping) + 1), Start: start, Limit: start + bin.Size, File: bin.File, BuildID: bin.BuildID}
					p.Mapping = append(p.Mapping, m)
					nativeMaps[nk] = m
				}
				addr := bin.pc(name, m.Start)
				lk := locKey{m, addr}
				if loc = locs[lk]; loc == nil {
					loc = newLocation(m, addr)
					locs[lk] = loc
				}
				hashStrings(hh, name)
			}
			s.Location = append(s.Location, loc)
		}
		p.Sample = append(p.Sample, s)
		hashes = append(hashes, hh.Sum64())
		b.Samples += n
		b.CPUNanos += n * period
	}
	for bin := range binaries {
		b.Binaries = append(b.Binaries, bin)
	}
	sort.Slice(b.Binaries, func(i, j int) bool { return b.Binaries[i].BuildID < b.Binaries[j].BuildID })
	b.Stacks = len(order)
	b.NewStack = h.f.noteStacks(hashes)
	return p, nil
}

// libBase is where process pr mapped shared library bin: page aligned,
// different per process start, as address space layout randomization does.
func (h *Host) libBase(pr *process, bin *Binary) uint64 {
	if a, ok := pr.libBase[bin.File]; ok {
		return a
	}
	a := uint64(0x7f0000000000) + uint64(h.rng.Int64N(1<<30))*pageSize
	pr.libBase[bin.File] = a
	return a
}

// Records are the batch's records under the record contract, in the order
// the agent publishes them.
func (b *Batch) Records(topics record.Topics, agentVersion string) []*kgo.Record {
	rec := func(typ record.ProfileType, v []byte) *kgo.Record {
		return &kgo.Record{Topic: topics.ProfilesRaw, Key: []byte(b.Host), Value: v,
			Headers: record.Meta{Type: typ, Host: b.Host, AgentVersion: agentVersion}.Headers()}
	}
	return []*kgo.Record{rec(record.ProfileCPU, b.CPU), rec(record.ProfileMemory, b.Memory)}
}

func hashStrings(h hash.Hash64, ss ...string) {
	for _, s := range ss {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
}

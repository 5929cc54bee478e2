package aggregate

// What a profile's samples contribute: each sample's stack (from the stack
// cache or built from the record) and the deltas it adds to the windows.

import (
	"encoding/binary"
	"unsafe"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pprofx"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

type stackInfo struct {
	id string
	// key is the 12 bytes id encodes, the stack's key in an hour's
	// stackTable.
	key stackKey
	// frames are the stack's trie frames (trieFrame), as IDs of the stack
	// cache's frame table: a cached stack held its frames whole until
	// 2026-12-01, 72 bytes a frame and its names, so the cache held a
	// third of the pipeline bench's 68,536 stacks, and building the
	// others again was a fifth of the rollup's CPU.
	frames stackFrames
	// trieBound is what inserting the stack into an hour's trie adds at
	// most, computed once: the budget check's bound walked every frame of
	// every stack of every profile (7% of the rollup's CPU under loadgen).
	trieBound int64
	// cachedBytes is what the stack cache charges for it, used the cache's
	// generation it was last found in (stackCache.giveWay).
	cachedBytes int64
	used        uint32
}

// stackBytes is an upper bound of what caching st holds besides its
// frames' entries in the frame table: the stackInfo, its ID, its frame IDs
// and its entry in the cache's map (TestStackBytesBound).
func stackBytes(st *stackInfo) int64 {
	return 176 + int64(len(st.id)) + 4*int64(cap(st.frames.ids)) + 16
}

// stack returns the ID and frames of a sample's stack. Hashing a stack's
// frames (sha256 for its ID) is most of the per-sample work, and the same
// stacks come back in every profile of a host, so they are cached by a
// hash of their frames.
func (p *Partition) stack(s *profile.Sample) *stackInfo {
	p.frames = p.frames[:0]
	for _, loc := range s.Location {
		p.frames = pprofx.LocationFrames(p.frames, loc)
	}
	b := p.keyBuf[:0]
	for _, f := range p.frames {
		b = appendBytes(b, unsafe.Slice(unsafe.StringData(f.Function), len(f.Function)))
		b = appendBytes(b, unsafe.Slice(unsafe.StringData(f.File), len(f.File)))
		b = appendBytes(b, unsafe.Slice(unsafe.StringData(f.Binary), len(f.Binary)))
		b = appendBytes(b, unsafe.Slice(unsafe.StringData(f.Kind), len(f.Kind)))
		b = binary.LittleEndian.AppendUint64(b, uint64(f.Line))
	}
	p.keyBuf = b
	return p.cachedStack(hash128(b))
}

// wireStack is stack for a sample of a Wire, locs its location indices:
// the stack's key is a hash of its locations' hashes, each computed once a
// profile, so a stack seen before costs no frames.
func (p *Partition) wireStack(w *Wire, locs []int32) *stackInfo {
	hs := p.locKey[:0]
	for _, i := range locs {
		hs = append(hs, w.locationHash(i, &p.keyBuf))
	}
	p.locKey = hs
	// The hashes' memory is the key: it is only compared within this
	// process, so its byte order does not matter.
	key := hash128(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(hs))), 16*len(hs)))
	c := p.stacks
	if st := c.get(key); st != nil {
		return st
	}
	// A new stack: its locations' frames as the cache keeps them, named
	// once (addLocation) for every stack of the instance.
	if w.locTable != c.table {
		clear(w.locFrames)
		w.locTable = c.table
	}
	c.begin()
	for j, i := range locs {
		lf := w.locFrames[i]
		if lf == nil {
			if lf = c.location(hs[j]); lf == nil {
				p.frames = w.appendFrames(p.frames[:0], i)
				lf = c.addLocation(hs[j], p.frames)
			}
			w.locFrames[i] = lf
		}
		c.extend(lf)
	}
	return c.end(key)
}

// cachedStack is the stack cached under key, else p.frames cached there.
func (p *Partition) cachedStack(key [2]uint64) *stackInfo {
	if st := p.stacks.get(key); st != nil {
		return st
	}
	return p.stacks.add(key, p.frames)
}

type delta struct {
	value, samples int64
	mem            int64
	hasMem         bool
	stack          *stackInfo // of a stack document
	stackValue     int64      // of a service document
}

// scratch is one series of a profile's sums: indices into Partition.deltas
// by stack ID.
type scratch struct {
	names map[string]int32
}

// maxScratchSeries bounds the scratch series kept for reuse.
const maxScratchSeries = 4096

// contributions sums one profile per document into p.out and p.deltas,
// which are reused across profiles so their memory is not allocated and
// grown again for every profile. vi and ci are the indices of the value
// and of the samples count (-1 without one).
func (p *Partition) contributions(in Input, vi, ci int) {
	// p.out holds this profile's series only: Add, newBytes and
	// thawBytes walk it for every profile, and with the series of every
	// host the partition saw kept in it (a 200-host fleet's thousands),
	// walking it was an eighth of the rollup's CPU in the pipeline bench.
	// Their scratch is kept in p.freeScratch for the next profile.
	if p.out == nil || len(p.out) > maxScratchSeries {
		p.out, p.freeScratch = map[seriesKey]*scratch{}, nil
	}
	for _, sc := range p.out {
		clear(sc.names)
		p.freeScratch = append(p.freeScratch, sc)
	}
	clear(p.out)
	p.deltas = p.deltas[:0]
	c := contributor{p: p, typ: string(in.Type), memory: in.Type == record.ProfileMemory}
	if w := in.Wire; w != nil {
		types := len(w.SampleTypes)
		for _, row := range w.sampleRows {
			values := w.values[row.values : int(row.values)+types]
			n := int64(1)
			if ci >= 0 {
				n = values[ci]
			}
			ls := &w.labelSets[row.labels]
			host := in.Host
			if host == "" {
				host = ls.host
			}
			var st *stackInfo
			if !c.memory && row.locs[1] > row.locs[0] {
				st = p.wireStack(w, w.locs[row.locs[0]:row.locs[1]])
			}
			c.add(ls.service, host, values[vi], n, st)
		}
		return
	}
	for _, s := range in.Profile.Sample {
		n := int64(1)
		if ci >= 0 && ci < len(s.Value) {
			n = s.Value[ci]
		}
		labels := record.Labels(s.Label)
		host := in.Host
		if host == "" {
			host = labels[record.LabelHost]
		}
		var st *stackInfo
		if !c.memory && len(s.Location) > 0 {
			st = p.stack(s)
		}
		c.add(record.DeriveService(labels), host, s.Value[vi], n, st)
	}
}

// contributor adds a profile's samples to p.out and p.deltas.
type contributor struct {
	p      *Partition
	typ    string
	memory bool
	// Samples of one process come together: keep the last service/host's series.
	lastService, lastHost string
	svcS, stS             *scratch
}

// add adds a sample of value v standing for n samples, whose stack is st
// (nil for a sample without locations, and in a memory profile).
func (c *contributor) add(service, host string, v, n int64, st *stackInfo) {
	if c.svcS == nil || service != c.lastService || host != c.lastHost {
		c.lastService, c.lastHost = service, host
		c.svcS = c.scratch(seriesKey{kind: indices.KindService, typ: c.typ, service: service, host: host})
		c.stS = c.scratch(seriesKey{kind: indices.KindStack, typ: c.typ, service: service, host: host})
	}
	svc := c.delta(c.svcS, "")
	svc.samples += n
	if c.memory {
		// One stack-less sample per process: the profile's service sum.
		svc.mem += v
		svc.hasMem = true
		return
	}
	svc.value += v
	if st == nil {
		return
	}
	svc.stackValue += v
	sd := c.delta(c.stS, st.id)
	sd.stack = st
	sd.value += v
	sd.samples += n
}

func (c *contributor) scratch(k seriesKey) *scratch {
	sc := c.p.out[k]
	if sc == nil {
		if free := c.p.freeScratch; len(free) > 0 {
			sc, c.p.freeScratch = free[len(free)-1], free[:len(free)-1]
		} else {
			sc = &scratch{names: map[string]int32{}}
		}
		c.p.out[k] = sc
	}
	return sc
}

func (c *contributor) delta(sc *scratch, name string) *delta {
	i, ok := sc.names[name]
	if !ok {
		i = int32(len(c.p.deltas))
		c.p.deltas = append(c.p.deltas, delta{})
		sc.names[name] = i
	}
	return &c.p.deltas[i]
}

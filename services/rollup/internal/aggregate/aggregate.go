// Package aggregate folds symbolized profiles into per-minute and per-hour
// event-time windows and turns them into rollup documents.
//
// State is kept per Kafka partition. Because records are keyed by host, every
// document (its _id includes the host) is computed from one partition only, so
// instances that share the partitions never write partial sums over each
// other. A window keeps every contribution in memory until it is evicted, so a
// late profile rewrites the whole document with the same _id (recomputation,
// never an increment), and the partition's commit offset never passes the
// first record of a window still in memory: after a restart those records are
// read again and the windows rebuilt whole.
package aggregate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pprofx"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// Errors of Add that send the record to the DLQ. A time outside the
// accepted window is record.ErrTimeOutOfRange.
var (
	ErrNoTime      = errors.New("profile has no time")
	ErrNoValues    = errors.New("profile has no sample types")
	ErrShortSample = errors.New("sample has fewer values than the profile declares")
	// ErrStateFull: folding the profile in would hold more documents in
	// memory than the Budget allows.
	ErrStateFull = errors.New("rollup state full")
)

// Config tunes the windows.
type Config struct {
	// AllowedLateness is how far behind the partition's watermark (the
	// newest event time seen) a window stays open before it is written.
	AllowedLateness time.Duration
	// Retention is how long after closing a window stays in memory so a late
	// profile can still update it by recomputation. Later than that the
	// profile is too late.
	Retention time.Duration
	// MaxClockSkew rejects profiles stamped further than this past now, so
	// one host with a wrong clock cannot push the watermark, close everyone's
	// windows, and create an index for a month retention never deletes.
	// 0 means record.DefaultMaxClockSkew.
	MaxClockSkew time.Duration
	// MaxAge rejects profiles older than this before now (wall clock): their
	// documents would land in indices retention deletes, or recreate them.
	// 0 accepts any past time.
	MaxAge time.Duration
	// Budget bounds the documents the partitions sharing it hold in memory;
	// nil leaves them unbounded.
	Budget *Budget
	Names  indices.Names
	Now    func() time.Time
	// Partition is the Kafka partition whose state this is: it names the
	// partition's service trees (indices.KindServiceTree).
	Partition int32
	// NoMinuteTrees leaves out the minute partition trees (the 10-minute
	// ones are still written): they cost about a byte per raw sample on
	// disk (docs/ROLLUP.md, "Part-hour documents").
	NoMinuteTrees bool
	// HeadMinNodes: a minute or 10-minute window writes its partition
	// head only when its partition tree has more than this many nodes
	// (the service sets DefaultHeadMinNodes with
	// STACKSTREAM_ROLLUP_WINDOW_HEADS and math.MaxInt, no head, without;
	// 0, as in tests, writes every head): a smaller tree is cheap to read
	// whole, and its head would cost about its bytes again (docs/ROLLUP.md,
	// "Window heads").
	HeadMinNodes int
}

// Budget bounds the heap that the window state of every Partition sharing it
// (one rollup instance) holds: each series of a window (a kind, type,
// service and host), each document in it, and each memory profile's sum in
// a memory document is charged a measured size plus the bytes of its names
// (TestStateBytesBound checks that the charge is above the heap held). A
// window's charge is returned when it is evicted, a partition's when it is
// released. A profile that would go past MaxBytes is refused with
// ErrStateFull and nothing of it is kept. Like Partition, it is not safe for
// concurrent use.
type Budget struct {
	MaxBytes int64
	// CacheMaxBytes bounds the stack cache within MaxBytes; 0 takes
	// DefaultStackCacheBytes.
	CacheMaxBytes int64
	used          int64
	stacks        *stackCache
}

// Used is the bytes charged: window state and the stack cache.
func (b *Budget) Used() int64 { return b.used }

// CacheBytes is the part of Used that is the stack cache.
func (b *Budget) CacheBytes() int64 {
	if b.stacks == nil {
		return 0
	}
	return b.stacks.bytes
}

// CacheStats are the counts of the stack cache's work so far.
func (b *Budget) CacheStats() CacheStats {
	if b.stacks == nil {
		return CacheStats{}
	}
	return b.stacks.stats
}

// stackCache is the stack cache of the partitions sharing b; a partition
// without a Budget gets one of its own.
func (b *Budget) stackCache() *stackCache {
	if b == nil {
		return newStackCache(nil)
	}
	if b.stacks == nil {
		b.stacks = newStackCache(b)
	}
	return b.stacks
}

// Charges of the Budget, measured by TestStateBytesBound with a margin: a
// document (its docState and map entry), a memory profile's sum, a series
// (its map and entry); names are charged their length on top.
const (
	docBytes    = 112
	memBytes    = 64
	seriesBytes = 420
)

// Outcome says what Add did with a profile.
type Outcome int

const (
	// Added folded the profile into its windows.
	Added Outcome = iota
	// TooLate means its minute window is past retention: the profile is not
	// counted and belongs in the DLQ.
	TooLate
	// Skipped means the profile was too late, but a run before a restart
	// already handled it (counted it in a window now evicted, or sent it to
	// the DLQ).
	Skipped
)

// Input is one decoded profile and where it came from.
type Input struct {
	// The profile: its tables as Decoder read them (Wire), else as
	// google/pprof's parser did (Profile).
	Wire    *Wire
	Profile *profile.Profile
	Type    record.ProfileType
	// Host is the record's host (record.Host: header, else key); when
	// empty, each sample's host label is used, as the indexer does.
	Host   string
	Offset int64
	// Fallback is the event time of a profile without TimeNanos (the
	// record's timestamp), as the indexer does.
	Fallback time.Time
}

// TimeNanos is the profile's time_nanos.
func (in Input) TimeNanos() int64 {
	if in.Wire != nil {
		return in.Wire.TimeNanos
	}
	return in.Profile.TimeNanos
}

type windowKey struct {
	res   string
	start int64 // unix nanoseconds
}

// seriesKey groups the documents of one kind, type, service and host; a
// series holds them by stack ID ("" for the service document). Two levels
// keep the per-sample lookup a single-string map access. Function
// documents are no series: they are computed from the hour's stacks when
// written (appendFunctions).
type seriesKey struct {
	kind, typ, service, host string
}

type series struct {
	// docs are a service series' documents (one, named "").
	docs map[string]*docState
	// stack: a stack series, whose one document (KindStacks) holds its
	// stacks' values by number in the window's stack table (stackdocs.go),
	// and sums is that document's state: its value and samples summed
	// over its stacks.
	stack  bool
	stacks map[int32]int64
	sums   docState
	// tree is the series' pre-merged call tree document (indices.KindTree),
	// for the stack series of hour windows: dirty when its stacks are.
	tree *docState
	// svc is the rest of a service series' one document: its value in
	// samples with a stack, and its memory sums.
	svc *serviceSums
	// frozen holds the documents (or stacks) instead of docs (or stacks)
	// while the series' hour window is frozen (freeze.go), or its minute
	// window packed (pack.go); thawing it charges thawBytes.
	frozen    []byte
	thawBytes int64
}

// docState is a document's sums and state.
type docState struct {
	// a and b are the document's two sums: a service's value and samples,
	// a stack series' value and samples.
	a, b        int64
	firstOffset int64
	dirty       bool
}

type serviceSums struct {
	stackValue int64
	// mem holds, per contributing memory profile (by offset), the summed RSS
	// of the service's processes in it.
	mem map[int64]int64
}

type window struct {
	key    windowKey
	end    int64
	series map[seriesKey]*series
	// serviceTrees are the hour's service and partition tree documents:
	// dirty when a tree of one of their hosts is; a part-hour window's
	// partition trees (parthour.go).
	serviceTrees map[serviceKey]*docState
	// trie holds the frames of an hour window's stacks, and table numbers
	// them (stackdocs.go); a part-hour window points at its hour's.
	trie  *frameTrie
	table *stackTable
	// values are a 10-minute window's stack values by type (parthour.go).
	values map[string]*nodeValues
	// packed: a minute window whose series are all encoded (pack.go).
	packed    bool
	minOffset int64
	closed    bool
	// rewriteAt is the watermark from which a part-hour window changed
	// since it closed is written again (RewriteDelay); 0 when it is not.
	rewriteAt int64
	// frozen: an hour window whose trie and stack series are frozen
	// (freeze.go); encoded counts its series held encoded (frozen or
	// packed), so a profile's bound skips the windows with none.
	frozen  bool
	encoded int
	dirty   int
	bytes   int64 // charged to the Budget
}

// Checkpoint travels with a committed offset (as commit metadata) so that a
// consumer reading again from that offset makes exactly the decisions the
// previous one made, and rebuilds exactly the windows it held:
//
//   - Watermark is the watermark as of the committed offset (the newest event
//     time among the records before it). Replaying from there recomputes the
//     watermark each record saw the first time, so every too-late decision
//     is the same.
//   - Floor is the watermark when the commit was made. Windows ending before
//     Floor minus lateness and retention had been written whole and evicted;
//     a record read again does not recreate them (it would overwrite the
//     stored sum with part of it).
//   - Next is the offset after the last record handled then: a too-late
//     record below it already went to the DLQ.
type Checkpoint struct {
	Watermark int64 // unix nanoseconds
	Floor     int64 // unix nanoseconds
	Next      int64
}

// String encodes the checkpoint for commit metadata.
func (c Checkpoint) String() string {
	return fmt.Sprintf("rollup/v1 wm=%d floor=%d next=%d", c.Watermark, c.Floor, c.Next)
}

// ParseCheckpoint decodes commit metadata; anything else (an empty string, a
// commit made by another tool) gives the zero Checkpoint and false.
func ParseCheckpoint(s string) (Checkpoint, bool) {
	var c Checkpoint
	if _, err := fmt.Sscanf(s, "rollup/v1 wm=%d floor=%d next=%d", &c.Watermark, &c.Floor, &c.Next); err != nil {
		return Checkpoint{}, false
	}
	if c.Floor < c.Watermark {
		return Checkpoint{}, false
	}
	return c, true
}

// Partition is the window state of one partition. It is not safe for
// concurrent use.
type Partition struct {
	cfg       Config
	watermark int64
	restored  Checkpoint
	// marks are the offsets where the watermark rose, with the watermark
	// after them, since the last commit: the watermark as of any offset.
	marks         []mark
	baseWatermark int64 // the watermark before the first mark
	next          int64 // offset after the last record seen; -1 before any
	windows       map[windowKey]*window
	lastCommitted int64
	lastNext      int64
	stacks        *stackCache            // the Budget's, or the partition's own without one
	bytes         int64                  // charged to the Budget by windows
	frames        []indices.Frame        // scratch
	keyBuf        []byte                 // scratch
	locKey        [][2]uint64            // scratch
	out           map[seriesKey]*scratch // a profile's sums
	freeScratch   []*scratch             // for out, reused
	deltas        []delta
	// slots and nodes are the deltas' stacks' numbers in their hour's
	// stack table and nodes in its trie (stackNumbers), for the series
	// and part-hour windows.
	slots []int32
	nodes []int32
	memo  trieMemo // scratch of the hour's trees and functions
	built docCount // DocumentsBuilt
}

// NewPartition starts the state of a partition, restoring the watermark of
// the checkpoint committed with its offset.
func NewPartition(cfg Config, cp Checkpoint) *Partition {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Partition{
		cfg: cfg, watermark: cp.Watermark, baseWatermark: cp.Watermark, restored: cp,
		next: -1, windows: map[windowKey]*window{}, lastCommitted: -1,
		stacks: cfg.Budget.stackCache(),
	}
}

// Watermark is the newest event time seen (restored on restart).
func (p *Partition) Watermark() time.Time { return time.Unix(0, p.watermark).UTC() }

// OpenWindows counts windows in memory (open, closed awaiting late data, or
// awaiting a write).
func (p *Partition) OpenWindows() int { return len(p.windows) }

// Next is the offset after the last record handled, or -1 before any.
func (p *Partition) Next() int64 { return p.next }

// Advance records that offset was handled without adding a profile (sent to
// the DLQ), so commits can move past it.
func (p *Partition) Advance(offset int64) {
	if offset+1 > p.next {
		p.next = offset + 1
	}
}

func truncate(ns int64, d time.Duration) int64 {
	return ns - ((ns%int64(d))+int64(d))%int64(d)
}

// Add folds a profile into its minute, 10-minute and hour windows,
// attributed to the minute of its start (profile TimeNanos).
func (p *Partition) Add(in Input) (Outcome, error) {
	at := in.TimeNanos()
	if at <= 0 && !in.Fallback.IsZero() {
		at = in.Fallback.UnixNano()
	}
	if at <= 0 {
		return 0, ErrNoTime
	}
	skew := p.cfg.MaxClockSkew
	if skew <= 0 {
		skew = record.DefaultMaxClockSkew
	}
	if err := record.CheckTime(time.Unix(0, at), p.cfg.Now(), p.cfg.MaxAge, skew); err != nil {
		return 0, err
	}
	head := in.Profile
	if in.Wire != nil {
		// Each sample has a value per sample type (Decoder checked it).
		head = in.Wire.header()
	}
	vi := pprofx.ValueIndex(head, string(in.Type))
	if vi < 0 {
		return 0, ErrNoValues
	}
	if in.Wire == nil {
		for _, s := range head.Sample {
			if vi >= len(s.Value) {
				return 0, fmt.Errorf("%w: %d values, %d sample types", ErrShortSample, len(s.Value), len(head.SampleType))
			}
		}
	}
	minute := truncate(at, time.Minute)
	if p.evicted(minute+int64(time.Minute), p.watermark) {
		p.Advance(in.Offset)
		if in.Offset < p.restored.Next {
			return Skipped, nil
		}
		return TooLate, nil
	}
	p.contributions(in, vi, pprofx.CountIndex(head))
	var targets []windowKey
	// The hour first: its trie gives the part-hour windows their stacks'
	// nodes. A part-hour window ends no later than its hour, so it is a
	// target only when its hour is.
	for _, res := range []string{indices.ResolutionHour, indices.ResolutionTenMinutes, indices.ResolutionMinute} {
		size := indices.WindowSize(res)
		if in.Offset < p.restored.Next && p.evicted(truncate(at, size)+int64(size), p.restored.Floor) {
			// Written whole and evicted before the last commit.
			continue
		}
		targets = append(targets, windowKey{res: res, start: truncate(at, size)})
	}
	if b := p.cfg.Budget; b != nil {
		n := p.newBytes(targets, in.Offset)
		// The cache gives way to the state.
		p.stacks.giveWay(b.used + n - b.MaxBytes)
		if b.used+n > b.MaxBytes {
			// Its time still moves the watermark: when every profile
			// brings new documents (the first of an hour, fleet-wide),
			// a watermark that stood still would never end the hour
			// holding the budget, and every later profile would be
			// refused. The watermark is then a function of the records
			// alone, whatever the budget held, as a replay needs.
			p.raiseWatermark(at, in.Offset)
			p.Advance(in.Offset)
			return 0, fmt.Errorf("%w: the profile adds %d bytes of documents to the %d held, limit %d", ErrStateFull, n, b.used, b.MaxBytes)
		}
	}
	p.slots = slices.Grow(p.slots[:0], len(p.deltas))[:len(p.deltas)]
	p.nodes = slices.Grow(p.nodes[:0], len(p.deltas))[:len(p.deltas)]
	var hour *window
	for _, k := range targets {
		w := p.window(k.res, at, in.Offset)
		if w.packed {
			p.unpack(w)
		}
		if k.res == indices.ResolutionHour {
			hour = w
			p.stackNumbers(w)
		} else if w.trie == nil || w.table == nil {
			w.trie, w.table = hour.trie, hour.table
		}
		for sk, sc := range p.out {
			if len(sc.names) == 0 {
				continue
			}
			if k.res == indices.ResolutionTenMinutes && sk.kind == indices.KindStack {
				p.foldTenMinutes(w, sk.typ, sc, in.Offset)
				continue
			}
			ws := w.series[sk]
			if ws != nil && ws.frozen != nil {
				p.thaw(w, ws)
			}
			if ws == nil {
				ws = p.newSeries(w, sk, len(sc.names), in.Offset)
			}
			if ws.stack {
				p.foldStacks(w, ws, sc)
			} else {
				for name, i := range sc.names {
					p.fold(w, ws, name, &p.deltas[i], in.Offset)
				}
			}
			if p.holdsPartitionTree(k.res) && k.res == indices.ResolutionMinute && sk.kind == indices.KindStack {
				p.markDirty(w, p.partitionTree(w, sk.typ, in.Offset))
			}
			if t := ws.tree; t != nil {
				p.markDirty(w, t)
				for _, k := range []serviceKey{{indices.KindServiceTree, sk.typ, sk.service}, {indices.KindPartitionTree, sk.typ, ""}} {
					st := w.serviceTrees[k]
					if st == nil {
						st = &docState{firstOffset: in.Offset}
						w.serviceTrees[k] = st
						p.charge(w, docBytes+int64(len(k.service)))
					}
					p.markDirty(w, st)
				}
			}
		}
	}
	p.raiseWatermark(at, in.Offset)
	p.Advance(in.Offset)
	return Added, nil
}

// holdsPartitionTree: a window of resolution res keeps a partition tree
// state (writesTree) when it writes a document from it. A minute with
// minute trees off (NoMinuteTrees) and no head (HeadMinNodes
// math.MaxInt: the service's defaults since 2026-12-02) writes none; its
// state, never marked stored, kept the minute dirty: never evicted, its
// tree built again and thrown away at every flush (most of the rollup's
// CPU in the pipeline bench's part A), and the commit held at its first
// record (docs/ROLLUP.md, "Minutes that write no tree").
func (p *Partition) holdsPartitionTree(res string) bool {
	if res == indices.ResolutionMinute && !p.writesWholeTree(res) && p.cfg.HeadMinNodes == math.MaxInt {
		return false
	}
	return p.writesTree(res)
}

func (p *Partition) raiseWatermark(at, offset int64) {
	if at > p.watermark {
		p.watermark = at
		p.marks = append(p.marks, mark{offset: offset, watermark: at})
	}
}

// HoldsEndedHour reports whether an hour window has ended (the watermark
// passed its end) and is not frozen yet (freeze.go): the consumer writes
// it at once, before folding more of the next hour in, so the two hours
// are held whole together for one profile, not for a poll of them.
func (p *Partition) HoldsEndedHour() bool {
	for _, w := range p.windows {
		if w.key.res == indices.ResolutionHour && w.trie != nil && !w.trie.frozen && w.end <= p.watermark {
			return true
		}
	}
	return false
}

// newSeries adds the series sk of window w, with room for n documents
// (or stacks), first folded at offset.
func (p *Partition) newSeries(w *window, sk seriesKey, n int, offset int64) *series {
	ws := &series{stack: sk.kind == indices.KindStack, sums: docState{firstOffset: offset}}
	if ws.stack {
		ws.stacks = make(map[int32]int64, n)
	} else {
		ws.docs = make(map[string]*docState, n)
	}
	w.series[sk] = ws
	p.charge(w, seriesBytes+int64(len(sk.service)+len(sk.host)))
	if hasTree(w.key.res, sk) {
		ws.tree = &docState{firstOffset: offset}
		p.charge(w, docBytes)
	}
	return ws
}

// fold adds a profile's delta to one document of a service series.
func (p *Partition) fold(w *window, ws *series, name string, d *delta, offset int64) {
	ds := ws.docs[name]
	if ds == nil {
		ds = &docState{firstOffset: offset}
		ws.docs[name] = ds
		p.charge(w, docBytes+int64(len(name)))
	}
	ds.a += d.value
	ds.b += d.samples
	if d.stackValue != 0 || d.hasMem {
		if ws.svc == nil {
			ws.svc = &serviceSums{}
		}
		ws.svc.stackValue += d.stackValue
	}
	if d.hasMem {
		m := ws.svc
		if m.mem == nil {
			m.mem = map[int64]int64{}
		}
		if _, ok := m.mem[offset]; !ok {
			p.charge(w, memBytes)
		}
		m.mem[offset] += d.mem
	}
	p.markDirty(w, ds)
}

func (p *Partition) charge(w *window, n int64) {
	w.bytes += n
	p.bytes += n
	if p.cfg.Budget != nil {
		p.cfg.Budget.used += n
	}
}

// newBytes is what folding the profile in p.out into the target windows
// would charge. At most every series and name of p.out is new in every
// window; only when that bound does not fit the budget are they looked up,
// which costs as much as the fold itself.
func (p *Partition) newBytes(targets []windowKey, offset int64) int64 {
	var bound int64
	for sk, sc := range p.out {
		if len(sc.names) == 0 {
			continue
		}
		bound += seriesBytes + 3*docBytes + int64(2*len(sk.service)+len(sk.host))
		for name, i := range sc.names {
			bound += docBytes + memBytes + int64(len(name))
			if st := p.deltas[i].stack; st != nil {
				bound += st.trieBound
			}
		}
	}
	bound *= int64(len(targets))
	bound += p.tenMinutesBytes(targets)
	unpack := p.unpackBytes(targets) + p.thawBytes(targets)
	bound += unpack
	if b := p.cfg.Budget; b == nil || b.used+bound <= b.MaxBytes {
		return bound
	}
	n := unpack + p.tenMinutesBytes(targets)
	// The hour's stack table numbers the stacks of every target (the hour
	// is the first).
	var table *stackTable
	if w := p.windows[targets[0]]; w != nil && targets[0].res == indices.ResolutionHour {
		table = w.table
	}
	for _, k := range targets {
		w := p.windows[k]
		// A window without a trie to insert into (new, or frozen without
		// late stacks yet) is charged what the profile's stacks add to an
		// empty one: counting each frame as new for every stack was many
		// times that, and refused the first profiles of every hour once
		// the state neared the budget.
		var t, scratch *frameTrie
		if w != nil {
			t = w.trie
		}
		empty := t == nil || t.frozen && t.late == nil
		// Into a trie that has nodes, each stack's own cost counts the
		// prefixes the profile's stacks share once per stack (a deep
		// profile of 20,000 stacks came to 277 MB, 4 times what it holds);
		// inserting them into an empty trie counts each shared prefix
		// once. Both bound what the fold adds: the smaller is charged.
		var perStack, shared int64
		for sk, sc := range p.out {
			if len(sc.names) == 0 {
				continue
			}
			if p.holdsPartitionTree(k.res) && sk.kind == indices.KindStack &&
				(w == nil || w.serviceTrees[serviceKey{indices.KindPartitionTree, sk.typ, ""}] == nil) {
				n += docBytes
				if k.res == indices.ResolutionTenMinutes {
					n += nodeValuesBytes
				}
			}
			if k.res == indices.ResolutionTenMinutes && sk.kind == indices.KindStack {
				// Its values are charged by tenMinutesBytes.
				continue
			}
			var ws *series
			if w != nil {
				ws = w.series[sk]
			}
			if ws == nil {
				n += seriesBytes + int64(len(sk.service)+len(sk.host))
				if hasTree(k.res, sk) {
					n += docBytes
					if w == nil || w.serviceTrees[serviceKey{indices.KindServiceTree, sk.typ, sk.service}] == nil {
						n += docBytes + int64(len(sk.service))
					}
					if w == nil || w.serviceTrees[serviceKey{indices.KindPartitionTree, sk.typ, ""}] == nil {
						n += docBytes
					}
				}
			}
			for name, i := range sc.names {
				if sk.kind == indices.KindStack {
					st := p.deltas[i].stack
					var num int32
					known := false
					if table != nil {
						num, known = table.index[st.key]
					}
					if !known || ws == nil || ws.stacks == nil {
						// A frozen series' stacks are charged by thawBytes;
						// counted again here, as the bound allows.
						n += stackDocBytes
					} else if _, ok := ws.stacks[num]; !ok {
						n += stackDocBytes
					}
					if k.res == indices.ResolutionHour && !known {
						n += tableStackBytes
						if scratch == nil {
							scratch = newFrameTrie()
						}
						_, added := scratch.insert(st.frames)
						shared += added
						if !empty {
							perStack += t.cost(st.frames)
						}
					}
					continue
				}
				var ds *docState
				if ws != nil {
					ds = ws.docs[name]
				}
				if ds == nil {
					n += docBytes + int64(len(name))
				}
				if p.deltas[i].hasMem {
					// A document not held yet has no memory slots either.
					if ds == nil || ws.svc == nil {
						n += memBytes
					} else if _, ok := ws.svc.mem[offset]; !ok {
						n += memBytes
					}
				}
			}
		}
		if !empty && perStack < shared {
			shared = perStack
		}
		n += shared
	}
	return n
}

// Release returns the partition's charge to the Budget: call it when the
// partition's state is dropped (revoked or lost).
func (p *Partition) Release() {
	if p.cfg.Budget != nil {
		p.cfg.Budget.used -= p.bytes
	}
	p.bytes = 0
	clear(p.windows)
}

type mark struct{ offset, watermark int64 }

// evicted reports whether a window ending at end is past retention at
// watermark wm.
func (p *Partition) evicted(end, wm int64) bool {
	return end+int64(p.cfg.AllowedLateness+p.cfg.Retention) <= wm
}

// watermarkBefore is the watermark as of offset: over the records below it.
func (p *Partition) watermarkBefore(offset int64) int64 {
	wm := p.baseWatermark
	for _, m := range p.marks {
		if m.offset >= offset {
			break
		}
		wm = m.watermark
	}
	return wm
}

func (p *Partition) window(res string, t, offset int64) *window {
	size := indices.WindowSize(res)
	k := windowKey{res: res, start: truncate(t, size)}
	w := p.windows[k]
	if w == nil {
		w = &window{key: k, end: k.start + int64(size), series: map[seriesKey]*series{}, serviceTrees: map[serviceKey]*docState{}, minOffset: offset}
		p.windows[k] = w
	}
	if offset < w.minOffset {
		w.minOffset = offset
	}
	return w
}

// Evict drops windows past retention whose documents are all stored, and
// packs the minute windows closed and stored (pack.go).
func (p *Partition) Evict() int {
	// An hour stays while a part-hour window of it does: their stacks are
	// nodes of its trie, charged to it.
	held := map[int64]bool{}
	for _, w := range p.windows {
		if w.key.res != indices.ResolutionHour && (w.dirty > 0 || !p.evicted(w.end, p.watermark)) {
			held[truncate(w.key.start, time.Hour)] = true
		}
	}
	n := 0
	for k, w := range p.windows {
		if w.dirty == 0 && p.evicted(w.end, p.watermark) && !(w.key.res == indices.ResolutionHour && held[w.key.start]) {
			p.charge(w, -w.bytes)
			delete(p.windows, k)
			n++
		} else if packable(w) {
			p.pack(w)
		} else if p.freezable(w) {
			p.freeze(w)
		}
	}
	// The trees' scratch (8 bytes a trie node) is not held between
	// writes: it is not charged to the Budget.
	p.memo = trieMemo{}
	return n
}

// Commit returns the offset that is safe to commit (every record below it
// belongs only to windows already evicted, or went to the DLQ) with its
// checkpoint, and false when neither the offset nor the checkpoint moved.
func (p *Partition) Commit() (int64, Checkpoint, bool) {
	off, cp, ok := p.Safe()
	// The same offset is committed again when more records were handled
	// since: the checkpoint's Next tells a restart which too-late records
	// already went to the DLQ.
	if !ok || (off == p.lastCommitted && p.next == p.lastNext) {
		return 0, Checkpoint{}, false
	}
	return off, cp, true
}

// Safe is Commit's offset and checkpoint whether or not they moved since
// the last commit (a commit that names a new snapshot makes them again);
// false before any record, or below the last commit.
func (p *Partition) Safe() (int64, Checkpoint, bool) {
	if p.next < 0 {
		return 0, Checkpoint{}, false
	}
	off := p.next
	for _, w := range p.windows {
		off = min(off, w.minOffset)
	}
	if off < p.lastCommitted {
		return 0, Checkpoint{}, false
	}
	return off, Checkpoint{Watermark: p.watermarkBefore(off), Floor: p.watermark, Next: p.next}, true
}

// Committed records a successful commit of offset with cp.
func (p *Partition) Committed(offset int64, cp Checkpoint) {
	p.lastCommitted = max(p.lastCommitted, offset)
	p.lastNext = cp.Next
	p.baseWatermark = p.watermarkBefore(offset)
	i := 0
	for i < len(p.marks) && p.marks[i].offset < offset {
		i++
	}
	p.marks = append(p.marks[:0], p.marks[i:]...)
}

// DefaultMaxStateBytes is the default Budget of a rollup instance.
const DefaultMaxStateBytes = 256 << 20

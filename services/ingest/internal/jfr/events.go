package jfr

import (
	"fmt"
	"strings"

	"github.com/stackstream/stackstream/schemas/record"
)

// Kind is what an event sampled.
type Kind uint8

const (
	CPU   Kind = iota // jdk.ExecutionSample: one CPU sample
	Alloc             // an allocation sample; Value is its bytes
	Lock              // a monitor enter or park; Value is the nanoseconds waited
)

// Frame is one Java frame: Name is pkg.Class.method (the method alone
// for frames without a class, as async-profiler's native ones), Line its
// line number or 0.
type Frame struct {
	Name string
	Line int64
}

// Sample is one event: its stack (an index into Recording.Stacks) and
// its weight.
type Sample struct {
	Kind  Kind
	Stack int
	Value int64
}

// Recording is what Parse read from a file.
type Recording struct {
	Stacks  [][]Frame // leaf first
	Samples []Sample
	// Events counts the events of every type by name, read or not.
	Events map[string]int
}

// eventKinds are the events read, with the field holding their weight
// ("" for none) and a fallback field when that one is 0.
type eventKind struct {
	kind             Kind
	weight, fallback string
	ticks            bool
}

var eventKinds = map[string]eventKind{
	"jdk.ExecutionSample":             {kind: CPU},
	"jdk.ObjectAllocationInNewTLAB":   {kind: Alloc, weight: "tlabSize", fallback: "allocationSize"},
	"jdk.ObjectAllocationOutsideTLAB": {kind: Alloc, weight: "allocationSize"},
	"jdk.ObjectAllocationSample":      {kind: Alloc, weight: "weight"},
	"jdk.JavaMonitorEnter":            {kind: Lock, weight: "duration", ticks: true},
	"jdk.ThreadPark":                  {kind: Lock, weight: "duration", ticks: true},
}

// Parse reads every chunk of a JFR file. A file with no events it reads is
// a Recording without samples, not an error.
func Parse(data []byte, l Limits) (*Recording, error) {
	rec := &Recording{Events: map[string]int{}}
	// Decoded values: at most MaxObjects, and at most two per input byte
	// (plus a margin): a real recording holds fewer than one per three bytes,
	// so a small hostile body cannot make many empty values.
	budget := budget{max: min(l.MaxObjects, 2*len(data)+1<<16)}
	for n := 0; len(data) > 0; n++ {
		if n == l.MaxChunks {
			return nil, fmt.Errorf("%w: JFR file has more than %d chunks", record.ErrTooLarge, l.MaxChunks)
		}
		h, err := readHeader(data)
		if err != nil {
			return nil, fmt.Errorf("chunk %d: %w", n, err)
		}
		if h.size > int64(l.MaxChunkBytes) {
			return nil, fmt.Errorf("%w: JFR chunk %d is %d bytes, limit %d", record.ErrTooLarge, n, h.size, l.MaxChunkBytes)
		}
		if err := readChunk(data[:h.size], h, l, &budget, rec); err != nil {
			return nil, fmt.Errorf("chunk %d: %w", n, err)
		}
		data = data[h.size:]
	}
	return rec, nil
}

// chunk is one chunk's classes and constant pools.
type chunk struct {
	h       header
	classes map[int64]*class
	pools   map[int64]map[int64]value
	stacks  map[int64]int // stack trace key -> index in Recording.Stacks
	methods map[int64]string
	// eventFields caches the field indexes of each event class read, by
	// class.ord.
	eventFields []eventFields
	rec         *Recording
	l           Limits
}

func readChunk(b []byte, h header, l Limits, objects *budget, rec *Recording) error {
	r := &buf{b: b, compressed: h.compressed}
	classes, err := metadata(r, h, l)
	if err != nil {
		return err
	}
	c := &chunk{h: h, classes: classes, pools: map[int64]map[int64]value{},
		stacks: map[int64]int{}, methods: map[int64]string{}, eventFields: make([]eventFields, len(classes)), rec: rec, l: l}
	d := &decoder{r: r, l: l, objects: objects}
	// Two passes: the constant pools (often at the end of the chunk) first,
	// then the events, which refer to them.
	counts := make([]int, len(classes))
	for pass := 0; pass < 2 && r.err == nil; pass++ {
		r.p = headerBytes
		for r.p < len(b) && r.err == nil {
			start := r.p
			size := r.i32()
			if r.err == nil && (size <= 0 || size > int64(len(b)-start)) {
				r.fail("event size %d at offset %d, %d bytes left in the chunk", size, start, len(b)-start)
			}
			typ := r.i64()
			if r.err != nil {
				break
			}
			end := start + int(size)
			r.b = b[:end]
			switch {
			case typ == typeMetadata:
			case typ == typeConstants:
				if pass == 0 {
					c.readPools(d)
				}
			case pass == 1:
				if ec := classes[typ]; ec != nil {
					counts[ec.ord]++
					if ef := c.info(ec); ef.read {
						v := d.readEvent(ec)
						if r.err == nil {
							c.sample(ec, ef, v)
						}
					}
				}
			}
			r.b, r.p = b, end
		}
	}
	for _, ec := range classes {
		if n := counts[ec.ord]; n > 0 {
			rec.Events[ec.name] += n
		}
	}
	return r.err
}

// readPools reads a constant pool event after its size and type.
func (c *chunk) readPools(d *decoder) {
	r := d.r
	r.i64() // start time
	r.i64() // duration
	r.i64() // delta to the previous constant pool event: all are read in order
	r.u8()  // flush or checkpoint type
	n := r.count("constant pool", 2)
	for i := 0; i < n && r.err == nil; i++ {
		typ := r.i64()
		cls := c.classes[typ]
		if cls == nil && r.err == nil {
			r.fail("constant pool of type %d, which the metadata does not declare", typ)
			return
		}
		cnt := r.count("constant", 1)
		if r.err != nil || !d.spend(cnt) {
			return
		}
		m := c.pools[typ]
		if m == nil {
			m = make(map[int64]value, min(cnt, 4096))
			c.pools[typ] = m
		}
		for j := 0; j < cnt && r.err == nil; j++ {
			key := r.i64()
			m[key] = d.read(cls, 0)
		}
	}
}

// get is field name of v, a value of class cls, following a constant pool
// reference; ok is false when there is no such field or entry.
func (c *chunk) get(v value, cls *class, name string) (value, *class, bool) {
	if cls == nil {
		return value{}, nil, false
	}
	i := cls.index(name)
	if i < 0 || i >= len(v.f) {
		return value{}, nil, false
	}
	f := cls.fields[i]
	fv := v.f[i]
	if f.cp && !f.array {
		var ok bool
		if fv, ok = c.pools[f.cls.id][fv.n]; !ok {
			return value{}, nil, false
		}
	}
	return fv, f.cls, true
}

// str is the text of a string or of a struct with a string field (a
// jdk.types.Symbol).
func (c *chunk) str(v value, cls *class) string {
	if cls == nil {
		return ""
	}
	if cls.kind == kString {
		if v.ref {
			return c.pools[cls.id][v.n].s
		}
		return v.s
	}
	if s, sc, ok := c.get(v, cls, "string"); ok && sc.kind == kString {
		return c.str(s, sc)
	}
	return ""
}

// eventFields are the indexes of an event class's fields read: -1 when absent.
type eventFields struct {
	known, read             bool
	kind                    eventKind
	stack, weight, fallback int
}

// numField is the index of the integer field name of c, or -1.
func numField(c *class, name string) int {
	i := c.index(name)
	if i < 0 || name == "" || c.fields[i].array || c.fields[i].cp || c.fields[i].cls.kind == kStruct || c.fields[i].cls.kind == kString {
		return -1
	}
	return i
}

// info is what the chunk reads of events of class ec, worked out once.
func (c *chunk) info(ec *class) *eventFields {
	ef := &c.eventFields[ec.ord]
	if !ef.known {
		ef.known = true
		k, ok := eventKinds[ec.name]
		ef.read, ef.kind = ok, k
		ef.stack, ef.weight, ef.fallback = ec.index("stackTrace"), numField(ec, k.weight), numField(ec, k.fallback)
		if ef.stack >= 0 && (!ec.fields[ef.stack].cp || ec.fields[ef.stack].array) {
			ef.stack = -1
		}
	}
	return ef
}

func (c *chunk) sample(ec *class, ef *eventFields, v []int64) {
	k := ef.kind
	s := Sample{Kind: k.kind, Stack: -1}
	i := ef.stack
	if i < 0 || i >= len(v) {
		return
	}
	s.Stack = c.stack(v[i], ec.fields[i].cls)
	if s.Stack < 0 {
		return
	}
	num := func(i int) int64 {
		if i < 0 || i >= len(v) {
			return 0
		}
		return v[i]
	}
	if k.weight != "" {
		s.Value = num(ef.weight)
		if s.Value <= 0 {
			s.Value = num(ef.fallback)
		}
		if k.ticks {
			s.Value = c.nanos(s.Value)
		}
		if s.Value < 0 {
			s.Value = 0
		}
	}
	c.rec.Samples = append(c.rec.Samples, s)
}

// nanos converts a duration in ticks.
func (c *chunk) nanos(ticks int64) int64 {
	if tps := c.h.ticksPerSecond; tps > 0 && tps != 1e9 {
		return int64(float64(ticks) * 1e9 / float64(tps))
	}
	return ticks
}

// stack returns the index of the stack trace key of class cls in
// Recording.Stacks, adding it the first time; -1 when it is missing.
func (c *chunk) stack(key int64, cls *class) int {
	if i, ok := c.stacks[key]; ok {
		return i
	}
	st, ok := c.pools[cls.id][key]
	if !ok {
		return -1
	}
	frames, fc, ok := c.get(st, cls, "frames")
	if !ok {
		return -1
	}
	fi := cls.index("frames")
	ref := cls.fields[fi].cp
	out := make([]Frame, 0, min(len(frames.f), c.l.MaxFrames))
	for _, fv := range frames.f {
		if len(out) == c.l.MaxFrames {
			break
		}
		if ref {
			if fv, ok = c.pools[fc.id][fv.n]; !ok {
				continue
			}
		}
		var f Frame
		if ln, lc, ok := c.get(fv, fc, "lineNumber"); ok && lc.kind != kStruct && ln.n > 0 {
			f.Line = ln.n
		}
		f.Name = c.method(fv, fc)
		out = append(out, f)
	}
	i := len(c.rec.Stacks)
	c.rec.Stacks = append(c.rec.Stacks, out)
	c.stacks[key] = i
	return i
}

// method names the method of a stack frame: pkg.Class.method.
func (c *chunk) method(frame value, fc *class) string {
	i := fc.index("method")
	if i < 0 || i >= len(frame.f) {
		return "[unknown]"
	}
	f := fc.fields[i]
	if f.cp {
		if name, ok := c.methods[frame.f[i].n]; ok {
			return name
		}
	}
	m, mc, ok := c.get(frame, fc, "method")
	if !ok {
		return "[unknown]"
	}
	name := "[unknown]"
	if n, nc, ok := c.get(m, mc, "name"); ok {
		if s := c.str(n, nc); s != "" {
			name = s
		}
	}
	// async-profiler's native frames (types Native, C++, Kernel) name the
	// library as their class: the symbol alone is their name.
	native := false
	if t, tc, ok := c.get(frame, fc, "type"); ok {
		switch c.str(t, tc) {
		case "Native", "C++", "Kernel":
			native = true
		}
		if d, dc, ok := c.get(t, tc, "description"); ok {
			switch c.str(d, dc) {
			case "Native", "C++", "Kernel":
				native = true
			}
		}
	}
	if t, tc, ok := c.get(m, mc, "type"); ok && !native {
		if n, nc, ok := c.get(t, tc, "name"); ok {
			if cls := c.str(n, nc); cls != "" {
				name = strings.ReplaceAll(cls, "/", ".") + "." + name
			}
		}
	}
	name = record.TruncateUTF8(name, c.l.MaxStringBytes)
	if f.cp {
		c.methods[frame.f[i].n] = name
	}
	return name
}

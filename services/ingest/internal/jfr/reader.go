// Package jfr reads Java Flight Recorder files (as the Pyroscope Java agent
// and async-profiler write them) into stack samples. The reader is generic
// over the file's own metadata: it learns the classes and fields each chunk
// declares, decodes every constant pool by them, and then picks the events
// it knows by name. Every count, size, string and nesting level is bounded
// (Limits), so a hostile file costs bounded memory and ends in an error.
package jfr

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/stackstream/stackstream/schemas/record"
)

// ErrInvalid is wrapped by every error about a malformed file. A file
// beyond Limits is record.ErrTooLarge instead.
var ErrInvalid = errors.New("invalid JFR")

// Limits bound what one file may make the reader decode.
type Limits struct {
	MaxChunks      int // chunks of one file
	MaxChunkBytes  int // one chunk, header included
	MaxStrings     int // metadata string table of a chunk
	MaxClasses     int // classes the metadata of a chunk declares
	MaxFields      int // fields of one class
	MaxDepth       int // nesting of metadata elements and of decoded values
	MaxObjects     int // decoded values (pool entries, fields, events) of a file; also at most 2 per byte
	MaxStringBytes int // one decoded string; longer ones are cut
	MaxFrames      int // frames of one stack; deeper stacks keep the leaf side
}

// DefaultLimits fit what the Pyroscope agent sends (one chunk of tens of
// kilobytes every 10 s) with a wide margin.
var DefaultLimits = Limits{
	MaxChunks:      64,
	MaxChunkBytes:  record.MaxProfileBytes,
	MaxStrings:     1 << 16,
	MaxClasses:     1 << 12,
	MaxFields:      256,
	MaxDepth:       16,
	MaxObjects:     1 << 20,
	MaxStringBytes: 4096,
	MaxFrames:      record.DefaultLimits().MaxLocationsPerSample,
}

const (
	headerBytes    = 68
	featCompressed = 1 // features bit: integers are LEB128-style varints
	typeMetadata   = 0
	typeConstants  = 1
)

// buf reads one chunk. Errors are sticky: after the first, every read
// returns zero and callers check err at their loops.
type buf struct {
	b          []byte
	p          int
	compressed bool
	err        error
}

func (r *buf) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
}

func (r *buf) left() int { return len(r.b) - r.p }

func (r *buf) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > r.left() {
		r.fail("%d bytes wanted at offset %d, %d left", n, r.p, r.left())
		return nil
	}
	b := r.b[r.p : r.p+n]
	r.p += n
	return b
}

func (r *buf) u8() byte {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return b[0]
}

// varint reads a compressed integer: 7 bits a byte, low first, the ninth
// byte giving all its 8 bits.
func (r *buf) varint() int64 {
	if r.err != nil {
		return 0
	}
	var v uint64
	for i := 0; i < 9; i++ {
		if r.p >= len(r.b) {
			r.fail("integer cut at offset %d", r.p)
			return 0
		}
		b := r.b[r.p]
		r.p++
		if i == 8 {
			return int64(v | uint64(b)<<56)
		}
		v |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			break
		}
	}
	return int64(v)
}

// fixed reads a big-endian integer of n bytes, or a varint in a compressed chunk.
func (r *buf) fixed(n int) int64 {
	if r.compressed {
		return r.varint()
	}
	b := r.bytes(n)
	switch {
	case b == nil:
		return 0
	case n == 2:
		return int64(int16(binary.BigEndian.Uint16(b)))
	case n == 4:
		return int64(int32(binary.BigEndian.Uint32(b)))
	}
	return int64(binary.BigEndian.Uint64(b))
}

func (r *buf) i32() int64 { return r.fixed(4) }
func (r *buf) i64() int64 { return r.fixed(8) }

// count reads an int that counts things of at least min bytes each and
// checks it against what is left.
func (r *buf) count(what string, min int) int {
	n := r.i32()
	if r.err != nil {
		return 0
	}
	if n < 0 || n*int64(min) > int64(r.left()) {
		r.fail("%s count %d at offset %d does not fit the %d bytes left", what, n, r.p, r.left())
		return 0
	}
	return int(n)
}

// String tags.
const (
	strNull = iota
	strEmpty
	strConstant
	strUTF8
	strChars
	strLatin1
)

// str reads a string. A reference to the string pool returns ref true and
// the key in key.
func (r *buf) str(maxBytes int) (s string, key int64, ref bool) {
	switch tag := r.u8(); tag {
	case strNull, strEmpty:
		return "", 0, false
	case strConstant:
		return "", r.i64(), true
	case strUTF8, strLatin1:
		b := r.bytes(r.count("string byte", 1))
		if tag == strLatin1 {
			rs := make([]rune, 0, min(len(b), maxBytes))
			for _, c := range b[:min(len(b), maxBytes)] {
				rs = append(rs, rune(c))
			}
			return record.TruncateUTF8(string(rs), maxBytes), 0, false
		}
		return record.TruncateUTF8(string(b[:min(len(b), maxBytes)]), maxBytes), 0, false
	case strChars:
		n := r.count("string char", 1)
		rs := make([]rune, 0, min(n, maxBytes))
		for i := 0; i < n && r.err == nil; i++ {
			c := r.fixed(2)
			if len(rs) < maxBytes {
				rs = append(rs, rune(uint16(c)))
			}
		}
		return record.TruncateUTF8(string(rs), maxBytes), 0, false
	default:
		r.fail("string tag %d at offset %d is not one of 0-5", tag, r.p-1)
	}
	return "", 0, false
}

// header is what the reader uses of a chunk header.
type header struct {
	size, constants, metadata int64
	startNanos, durationNanos int64
	ticksPerSecond            int64
	compressed                bool
}

func readHeader(b []byte) (header, error) {
	var h header
	if !bytes.HasPrefix(b, []byte("FLR\x00")) {
		return h, fmt.Errorf("%w: chunk does not start with FLR\\0 (got %q)", ErrInvalid, b[:min(len(b), 4)])
	}
	if len(b) < headerBytes {
		return h, fmt.Errorf("%w: %d bytes left, a chunk header is %d", ErrInvalid, len(b), headerBytes)
	}
	if major := binary.BigEndian.Uint16(b[4:]); major != 1 && major != 2 {
		return h, fmt.Errorf("%w: chunk version %d.%d: read 1.x and 2.x", ErrInvalid, major, binary.BigEndian.Uint16(b[6:]))
	}
	l := func(off int) int64 { return int64(binary.BigEndian.Uint64(b[off:])) }
	h.size, h.constants, h.metadata = l(8), l(16), l(24)
	h.startNanos, h.durationNanos, h.ticksPerSecond = l(32), l(40), l(56)
	h.compressed = binary.BigEndian.Uint32(b[64:])&featCompressed != 0
	if h.size < headerBytes || h.size > int64(len(b)) {
		return h, fmt.Errorf("%w: chunk size %d, %d bytes left", ErrInvalid, h.size, len(b))
	}
	if h.metadata < headerBytes || h.metadata >= h.size {
		return h, fmt.Errorf("%w: metadata offset %d outside the chunk of %d bytes", ErrInvalid, h.metadata, h.size)
	}
	return h, nil
}

// primitive kinds of a class; 0 is a class of fields.
const (
	kStruct = iota
	kBool
	kByte
	kChar
	kShort
	kInt
	kLong
	kFloat
	kDouble
	kString
)

var primitives = map[string]int{
	"boolean": kBool, "byte": kByte, "char": kChar, "short": kShort, "int": kInt,
	"long": kLong, "float": kFloat, "double": kDouble, "java.lang.String": kString,
}

type class struct {
	id     int64
	ord    int // 0..len(classes)-1: an index into a chunk's per-class slices
	name   string
	kind   int
	fields []field
}

type field struct {
	name  string
	typ   int64
	cls   *class
	cp    bool // the value is a key of the constant pool of cls
	array bool
}

// value is one decoded value: n holds integers, booleans and constant
// pool keys (ref says it is one), s strings, f the fields of a struct or
// the elements of an array.
type value struct {
	n   int64
	s   string
	ref bool
	f   []value
}

func (c *class) index(name string) int {
	for i, f := range c.fields {
		if f.name == name {
			return i
		}
	}
	return -1
}

// element is a node of the metadata tree.
type element struct {
	name     string
	attrs    [][2]string // key, value
	children []*element
}

func (e *element) attr(k string) string {
	for _, a := range e.attrs {
		if a[0] == k {
			return a[1]
		}
	}
	return ""
}

// metadataCache keeps the classes of metadata events seen before, by their
// bytes: an agent sends the same metadata with every recording. The
// classes are not changed once built, so requests share them. The key
// holds the limits too: what passed one set may not pass another.
var metadataCache = struct {
	sync.Mutex
	m map[metadataKey]map[int64]*class
}{m: map[metadataKey]map[int64]*class{}}

type metadataKey struct {
	l     Limits
	bytes string
}

const (
	metadataCacheEntries  = 64
	metadataCacheMaxBytes = 64 << 10 // larger metadata is not kept: at most 4 MiB of keys
)

// metadata is readMetadata through metadataCache.
func metadata(r *buf, h header, l Limits) (map[int64]*class, error) {
	r.p = int(h.metadata)
	size := r.i32()
	if r.err != nil || size <= 0 || size > int64(len(r.b))-h.metadata || size > metadataCacheMaxBytes {
		r.err = nil
		return readMetadata(r, h, l)
	}
	key := metadataKey{l: l, bytes: string(r.b[h.metadata : h.metadata+size])}
	metadataCache.Lock()
	classes, ok := metadataCache.m[key]
	metadataCache.Unlock()
	if ok {
		return classes, nil
	}
	classes, err := readMetadata(r, h, l)
	if err != nil {
		return nil, err
	}
	metadataCache.Lock()
	if len(metadataCache.m) >= metadataCacheEntries {
		clear(metadataCache.m)
	}
	metadataCache.m[key] = classes
	metadataCache.Unlock()
	return classes, nil
}

// readMetadata reads the metadata event at h.metadata into classes by id.
func readMetadata(r *buf, h header, l Limits) (map[int64]*class, error) {
	r.p = int(h.metadata)
	start := r.p
	size := r.i32()
	if typ := r.i64(); r.err == nil && typ != typeMetadata {
		r.fail("event at the metadata offset %d has type %d, not 0", start, typ)
	}
	r.i64() // start time
	r.i64() // duration
	r.i64() // metadata id
	if r.err == nil && (size <= 0 || size > int64(len(r.b)-start)) {
		r.fail("metadata event size %d at offset %d", size, start)
	}
	n := r.count("metadata string", 1)
	if n > l.MaxStrings {
		return nil, fmt.Errorf("%w: metadata has %d strings, limit %d", record.ErrTooLarge, n, l.MaxStrings)
	}
	strs := make([]string, n)
	for i := range strs {
		s, _, ref := r.str(l.MaxStringBytes)
		if ref {
			r.fail("metadata string %d refers to a constant pool", i)
		}
		strs[i] = s
	}
	elems := 0
	root := readElement(r, strs, l, 0, &elems)
	if r.err != nil {
		return nil, r.err
	}
	classes := map[int64]*class{}
	var walk func(e *element) error
	walk = func(e *element) error {
		if e.name == "class" {
			c, err := newClass(e, l)
			if err != nil {
				return err
			}
			if len(classes) == l.MaxClasses {
				return fmt.Errorf("%w: metadata declares more than %d classes", record.ErrTooLarge, l.MaxClasses)
			}
			classes[c.id] = c
			return nil
		}
		for _, ch := range e.children {
			if err := walk(ch); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(root); err != nil {
		return nil, err
	}
	ord := 0
	for _, c := range classes {
		c.ord = ord
		ord++
		for i := range c.fields {
			f := &c.fields[i]
			if f.cls = classes[f.typ]; f.cls == nil {
				return nil, fmt.Errorf("%w: field %s.%s has type %d, which the metadata does not declare", ErrInvalid, c.name, f.name, f.typ)
			}
		}
	}
	// A struct may not contain itself inline (its values would not end),
	// nor nest deeper than MaxDepth.
	depths := make(map[*class]int, len(classes))
	for _, c := range classes {
		d, err := inlineDepth(c, depths)
		if err != nil {
			return nil, err
		}
		if d > l.MaxDepth {
			return nil, fmt.Errorf("%w: class %s nests %d classes inline, deeper than %d", ErrInvalid, c.name, d, l.MaxDepth)
		}
	}
	return classes, nil
}

// inlineDepth is how many structs deep the values of c nest, memoized in
// depths (-1 while c is being visited, which finds cycles).
func inlineDepth(c *class, depths map[*class]int) (int, error) {
	if d, ok := depths[c]; ok {
		if d < 0 {
			return 0, fmt.Errorf("%w: class %s contains itself inline", ErrInvalid, c.name)
		}
		return d, nil
	}
	depths[c] = -1
	d := 0
	for _, f := range c.fields {
		if !f.cp && f.cls.kind == kStruct {
			fd, err := inlineDepth(f.cls, depths)
			if err != nil {
				return 0, err
			}
			d = max(d, fd+1)
		}
	}
	depths[c] = d
	return d, nil
}

func readElement(r *buf, strs []string, l Limits, depth int, total *int) *element {
	if depth > l.MaxDepth {
		r.fail("metadata elements nest deeper than %d", l.MaxDepth)
		return nil
	}
	*total++
	if *total > l.MaxObjects {
		r.fail("metadata has more than %d elements", l.MaxObjects)
		return nil
	}
	str := func() string {
		i := r.i32()
		if r.err == nil && (i < 0 || i >= int64(len(strs))) {
			r.fail("metadata string index %d of %d", i, len(strs))
			return ""
		}
		if r.err != nil {
			return ""
		}
		return strs[i]
	}
	e := &element{name: str()}
	n := r.count("metadata attribute", 2)
	if n > 0 {
		e.attrs = make([][2]string, 0, n)
	}
	for i := 0; i < n && r.err == nil; i++ {
		k := str()
		e.attrs = append(e.attrs, [2]string{k, str()})
	}
	n = r.count("metadata element", 3)
	for i := 0; i < n && r.err == nil; i++ {
		if ch := readElement(r, strs, l, depth+1, total); ch != nil {
			e.children = append(e.children, ch)
		}
	}
	return e
}

func newClass(e *element, l Limits) (*class, error) {
	c := &class{name: e.attr("name")}
	var err error
	if c.id, err = parseID(e.attr("id")); err != nil {
		return nil, fmt.Errorf("%w: class %q: id: %v", ErrInvalid, c.name, err)
	}
	c.kind = primitives[c.name]
	for _, ch := range e.children {
		if ch.name != "field" {
			continue
		}
		if len(c.fields) == l.MaxFields {
			return nil, fmt.Errorf("%w: class %q has more than %d fields", record.ErrTooLarge, c.name, l.MaxFields)
		}
		f := field{name: ch.attr("name"), cp: ch.attr("constantPool") == "true"}
		if f.typ, err = parseID(ch.attr("class")); err != nil {
			return nil, fmt.Errorf("%w: field %s.%s: class: %v", ErrInvalid, c.name, f.name, err)
		}
		switch d := ch.attr("dimension"); d {
		case "", "0":
		case "1":
			f.array = true
		default:
			return nil, fmt.Errorf("%w: field %s.%s has dimension %q: read 0 and 1", ErrInvalid, c.name, f.name, d)
		}
		c.fields = append(c.fields, f)
	}
	if c.kind != kStruct && len(c.fields) > 0 {
		return nil, fmt.Errorf("%w: primitive class %s declares fields", ErrInvalid, c.name)
	}
	return c, nil
}

func parseID(s string) (int64, error) {
	if s == "" || len(s) > 19 {
		return 0, fmt.Errorf("%q is not a class id", s)
	}
	var v int64
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a class id", s)
		}
		v = v*10 + int64(c-'0')
	}
	return v, nil
}

// decoder decodes values of one chunk and counts them against the file's budget.
type decoder struct {
	r       *buf
	l       Limits
	objects *budget
	scratch []int64 // the fields of the event being read
}

// readEvent reads an event's fields and returns their integers (integer
// and boolean fields, constant pool keys; 0 for the others) in a slice
// reused by the next call. Integers only: no write barriers on the hot path.
func (d *decoder) readEvent(c *class) []int64 {
	if !d.spend(1) {
		return nil
	}
	if cap(d.scratch) < len(c.fields) {
		d.scratch = make([]int64, len(c.fields))
	}
	v := d.scratch[:len(c.fields)]
	for i := range c.fields {
		if d.r.err != nil {
			break
		}
		switch f := &c.fields[i]; {
		case f.array:
			d.field(f, 1)
			v[i] = 0
		case f.cp:
			v[i] = d.r.i64()
		case f.cls.kind == kLong:
			v[i] = d.r.i64()
		case f.cls.kind == kInt:
			v[i] = d.r.i32()
		default:
			v[i] = d.read(f.cls, 1).n
		}
	}
	return v
}

// budget counts the decoded values of a file.
type budget struct{ n, max int }

func (d *decoder) spend(n int) bool {
	d.objects.n += n
	if d.objects.n > d.objects.max {
		if d.r.err == nil {
			d.r.err = fmt.Errorf("%w: more than %d decoded values", record.ErrTooLarge, d.objects.max)
		}
		return false
	}
	return true
}

func (d *decoder) read(c *class, depth int) value {
	r := d.r
	if !d.spend(1) {
		return value{}
	}
	switch c.kind {
	case kBool, kByte:
		return value{n: int64(r.u8())}
	case kChar, kShort:
		return value{n: r.fixed(2)}
	case kInt:
		return value{n: r.i32()}
	case kLong:
		return value{n: r.i64()}
	case kFloat:
		b := r.bytes(4)
		if b == nil {
			return value{}
		}
		return value{n: int64(math.Float32frombits(binary.BigEndian.Uint32(b)))}
	case kDouble:
		b := r.bytes(8)
		if b == nil {
			return value{}
		}
		return value{n: int64(math.Float64frombits(binary.BigEndian.Uint64(b)))}
	case kString:
		s, key, ref := r.str(d.l.MaxStringBytes)
		return value{s: s, n: key, ref: ref}
	}
	if depth > d.l.MaxDepth {
		r.fail("values nest deeper than %d", d.l.MaxDepth)
		return value{}
	}
	v := value{f: make([]value, len(c.fields))}
	for i := range c.fields {
		if r.err != nil {
			break
		}
		v.f[i] = d.field(&c.fields[i], depth+1)
	}
	return v
}

func (d *decoder) field(f *field, depth int) value {
	if f.array {
		n := d.r.count("array element", 1)
		if d.r.err != nil || !d.spend(n) {
			return value{}
		}
		v := value{f: make([]value, n)}
		for i := range v.f {
			if d.r.err != nil {
				break
			}
			v.f[i] = d.one(f, depth)
		}
		return v
	}
	return d.one(f, depth)
}

func (d *decoder) one(f *field, depth int) value {
	if f.cp {
		return value{n: d.r.i64(), ref: true}
	}
	return d.read(f.cls, depth)
}

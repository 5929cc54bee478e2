// Package perfmap reads the perf maps JIT compilers write to
// /tmp/perf-PID.map (one "START SIZE NAME" line per piece of generated code,
// addresses and sizes in hex) and answers which name covers an address.
//
// The file is written by the profiled process, so it is hostile input: every
// read is bounded (Limits), a line too long is skipped whole, a malformed
// line costs only itself. Perf maps are append-only (V8, CPython, most
// JITs): a Reader parses only what was appended since its last read, and
// starts over when the file was replaced or rewritten (HotSpot's
// Compiler.perfmap rewrites it whole).
package perfmap

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"syscall"
)

// Errors, checked with errors.Is.
var (
	// ErrTooLarge: the file or its entries are over a bound; what was read
	// up to the bound is kept.
	ErrTooLarge = errors.New("perf map too large")
	// ErrNotRegular: the file is not a regular file.
	ErrNotRegular = errors.New("perf map not a regular file")
)

// Limits bound what a Reader holds and reads.
type Limits struct {
	MaxFileBytes int64 // bytes of one file read in all; later appends are ignored
	MaxReadBytes int64 // bytes read by one Read; the rest waits for the next
	MaxLineBytes int   // a longer line is skipped
	MaxEntries   int   // entries held; later ones are ignored
	MaxNameBytes int   // a longer name is cut
}

// DefaultLimits: a large Java service's map is a few MB (tens of thousands
// of compiled methods); node with --perf-basic-prof appends without end, so
// its map is read up to 16 MiB. An entry costs 24 bytes plus its name.
var DefaultLimits = Limits{
	MaxFileBytes: 16 << 20,
	MaxReadBytes: 4 << 20,
	MaxLineBytes: 4 << 10,
	MaxEntries:   262144,
	MaxNameBytes: 1024,
}

// entry is one line: [start, start+size) named arena[off:off+n].
type entry struct {
	start uint64
	size  uint32
	off   uint32
	n     uint16
	seq   uint32 // order of appearance: a later entry for the same code wins
}

// Table is a sorted set of entries.
type Table struct {
	entries []entry // by start, then seq
	arena   []byte  // names
	seq     uint32
}

// Len is the number of entries.
func (t *Table) Len() int { return len(t.entries) }

// Bytes is the memory the table holds.
func (t *Table) Bytes() int64 { return int64(cap(t.entries))*24 + int64(cap(t.arena)) }

// maxOverlapScan bounds how many entries below an address are checked when
// the nearest one does not cover it (code regions replaced by larger ones).
const maxOverlapScan = 16

// Lookup returns the name of the entry covering addr; among overlapping
// entries the one starting nearest below addr wins, and among entries with
// the same start the last written.
func (t *Table) Lookup(addr uint64) (string, bool) {
	i, _ := slices.BinarySearchFunc(t.entries, addr, func(e entry, a uint64) int {
		if e.start <= a {
			return -1
		}
		return 1
	})
	// i is the first entry starting above addr.
	for j := i - 1; j >= 0 && j >= i-maxOverlapScan; j-- {
		e := &t.entries[j]
		if addr-e.start < uint64(e.size) {
			return string(t.arena[e.off : e.off+uint32(e.n)]), true
		}
	}
	return "", false
}

// merge adds sorted new entries.
func (t *Table) merge(add []entry) {
	if len(add) == 0 {
		return
	}
	cmp := func(a, b entry) int {
		if a.start != b.start {
			if a.start < b.start {
				return -1
			}
			return 1
		}
		return int(int64(a.seq) - int64(b.seq))
	}
	slices.SortFunc(add, cmp)
	if len(t.entries) == 0 || cmp(t.entries[len(t.entries)-1], add[0]) < 0 {
		t.entries = append(t.entries, add...)
		return
	}
	out := make([]entry, 0, len(t.entries)+len(add))
	i, j := 0, 0
	for i < len(t.entries) && j < len(add) {
		if cmp(t.entries[i], add[j]) <= 0 {
			out = append(out, t.entries[i])
			i++
		} else {
			out = append(out, add[j])
			j++
		}
	}
	out = append(out, t.entries[i:]...)
	out = append(out, add[j:]...)
	t.entries = out
}

// parseLine parses "START SIZE NAME"; START and SIZE are hex with or without
// 0x. It reports false for a malformed line or an empty range.
func parseLine(line []byte) (start, size uint64, name []byte, ok bool) {
	line = bytes.TrimRight(line, "\r")
	a, rest, ok1 := bytes.Cut(line, []byte{' '})
	b, name, ok2 := bytes.Cut(rest, []byte{' '})
	if !ok1 || !ok2 {
		return 0, 0, nil, false
	}
	start, err1 := parseHex(a)
	size, err2 := parseHex(b)
	if err1 != nil || err2 != nil || size == 0 || start+size < start {
		return 0, 0, nil, false
	}
	return start, size, bytes.TrimSpace(name), true
}

func parseHex(b []byte) (uint64, error) {
	if len(b) > 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		b = b[2:]
	}
	if len(b) == 0 || len(b) > 16 {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseUint(string(b), 16, 64)
}

// Parse parses a whole perf map held in memory (tests, fuzzing); lines past
// the limits are dropped as a Reader drops them.
func Parse(b []byte, lim Limits) (*Table, error) {
	r := NewReader(lim)
	if len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b[:len(b):len(b)], '\n')
	}
	if int64(len(b)) > lim.MaxFileBytes {
		b = b[:lim.MaxFileBytes]
	}
	_, err := r.Apply(Chunk{From: 0, Data: b, Size: int64(len(b)), EOF: true})
	return &r.table, err
}

// checkBytes is how many bytes of the file's head, and before the read
// offset, must be unchanged for an incremental read to go on.
const checkBytes = 64

// State is what a Reader knows of its file, to decide what to read next. It
// is a copy: ReadChunk may run on another goroutine (and be abandoned).
type State struct {
	Dev, Ino uint64
	Offset   int64  // bytes parsed (ends after a newline)
	Head     []byte // the first checkBytes bytes at the last read
	Tail     []byte // the checkBytes bytes before Offset
}

// Chunk is what ReadChunk read: the file's bytes from From, or from 0 when
// Restart (another file, or this one rewritten).
type Chunk struct {
	Dev, Ino uint64
	Size     int64 // of the file
	From     int64
	Restart  bool
	Head     []byte
	Data     []byte
	EOF      bool // Data reaches the end of the file (or of the bound)
}

// ReadChunk reads from f what a Reader in state s has not parsed, at most
// lim.MaxReadBytes and up to lim.MaxFileBytes of the file. f is not closed.
func ReadChunk(f *os.File, s State, lim Limits) (Chunk, error) {
	fi, err := f.Stat()
	if err != nil {
		return Chunk{}, fmt.Errorf("stat perf map: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return Chunk{}, ErrNotRegular
	}
	c := Chunk{Size: fi.Size(), From: s.Offset}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		c.Dev, c.Ino = st.Dev, st.Ino
	}
	head := make([]byte, min(checkBytes, c.Size))
	if _, err := f.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return Chunk{}, fmt.Errorf("read perf map: %w", err)
	}
	c.Head = head
	same := c.Dev == s.Dev && c.Ino == s.Ino && c.Size >= s.Offset && bytes.Equal(head[:min(len(head), len(s.Head))], s.Head)
	if same && len(s.Tail) > 0 {
		tail := make([]byte, len(s.Tail))
		if _, err := f.ReadAt(tail, s.Offset-int64(len(tail))); err != nil || !bytes.Equal(tail, s.Tail) {
			same = false
		}
	}
	if !same {
		c.Restart, c.From = true, 0
	}
	end := min(c.Size, lim.MaxFileBytes)
	n := min(end-c.From, lim.MaxReadBytes)
	if n <= 0 {
		c.EOF = true
		return c, nil
	}
	c.Data = make([]byte, n)
	m, err := f.ReadAt(c.Data, c.From)
	c.Data = c.Data[:m]
	if err != nil && !errors.Is(err, io.EOF) {
		return Chunk{}, fmt.Errorf("read perf map: %w", err)
	}
	c.EOF = c.From+int64(m) >= end
	return c, nil
}

// Reader holds the table of one perf map and reads it incrementally.
type Reader struct {
	lim   Limits
	table Table
	state State
	// skipping: the bytes at state.Offset continue a line over the bound.
	skipping bool
	full     bool // MaxEntries or MaxFileBytes reached
}

// NewReader returns an empty Reader.
func NewReader(lim Limits) *Reader { return &Reader{lim: lim} }

// State is what ReadChunk needs.
func (r *Reader) State() State { return r.state }

// Table is the entries read so far.
func (r *Reader) Table() *Table { return &r.table }

// Lookup is Table().Lookup.
func (r *Reader) Lookup(addr uint64) (string, bool) { return r.table.Lookup(addr) }

// Reset forgets everything: the next read starts from the beginning (the
// file is known to have been rewritten).
func (r *Reader) Reset() { *r = Reader{lim: r.lim} }

// Update reads what is new in f and adds it.
func (r *Reader) Update(f *os.File) (int, error) {
	c, err := ReadChunk(f, r.State(), r.lim)
	if err != nil {
		return 0, err
	}
	return r.Apply(c)
}

// Apply parses a chunk read by ReadChunk from this Reader's State, and
// returns the number of entries added. Only whole lines are consumed: a line
// still being written is read again next time. It returns ErrTooLarge when a
// bound stopped it (the entries up to the bound are kept).
func (r *Reader) Apply(c Chunk) (int, error) {
	if c.Restart {
		r.Reset()
	}
	if r.full {
		return 0, ErrTooLarge
	}
	data := c.Data
	// Sized up front: appends growing by 1.25 would allocate about five
	// times the final arena and entries.
	add := make([]entry, 0, min(bytes.Count(data, []byte{'\n'}), max(0, r.lim.MaxEntries-len(r.table.entries))))
	r.table.arena = slices.Grow(r.table.arena, min(len(data), 1<<32-1-len(r.table.arena)))
	var errOut error
	consumed := 0
	for consumed < len(data) {
		nl := bytes.IndexByte(data[consumed:], '\n')
		if nl < 0 {
			// An unterminated line: read again once complete, unless it is
			// already too long or the file ends at the bound.
			rest := len(data) - consumed
			if rest > r.lim.MaxLineBytes {
				r.skipping = true
				consumed = len(data)
			} else if c.EOF && c.From+int64(len(data)) >= r.lim.MaxFileBytes {
				consumed = len(data)
			}
			break
		}
		line := data[consumed : consumed+nl]
		consumed += nl + 1
		if r.skipping {
			r.skipping = false
			continue
		}
		if len(line) > r.lim.MaxLineBytes {
			continue
		}
		start, size, name, ok := parseLine(line)
		if !ok {
			continue
		}
		if len(r.table.entries)+len(add) >= r.lim.MaxEntries {
			r.full = true
			errOut = fmt.Errorf("%w: more than %d entries", ErrTooLarge, r.lim.MaxEntries)
			break
		}
		if len(name) > r.lim.MaxNameBytes {
			name = name[:r.lim.MaxNameBytes]
		}
		if len(r.table.arena)+len(name) > 1<<32-1 {
			r.full = true
			errOut = fmt.Errorf("%w: names over 4 GiB", ErrTooLarge)
			break
		}
		off := uint32(len(r.table.arena))
		r.table.arena = append(r.table.arena, name...)
		r.table.seq++
		add = append(add, entry{start: start, size: uint32(min(size, 1<<32-1)), off: off, n: uint16(len(name)), seq: r.table.seq})
	}
	// A large chunk reserved its whole size for names; give back what the
	// addresses took. Small appends keep the spare room for the next ones.
	if spare := cap(r.table.arena) - len(r.table.arena); len(data) > 64<<10 && spare > len(r.table.arena)/4 {
		r.table.arena = slices.Clone(r.table.arena)
	}
	r.table.merge(add)
	newOffset := c.From + int64(consumed)
	r.state.Dev, r.state.Ino = c.Dev, c.Ino
	r.state.Head = append(r.state.Head[:0], c.Head...)
	// The tail check: the bytes before the new offset, from this chunk, or
	// the previous tail when nothing was consumed.
	if consumed > 0 {
		t := data[max(0, consumed-checkBytes):consumed]
		if len(t) < checkBytes && c.From > 0 && !c.Restart {
			prev := r.state.Tail
			t = append(append([]byte(nil), prev[max(0, len(prev)-(checkBytes-len(t))):]...), t...)
		}
		r.state.Tail = append([]byte(nil), t...)
	}
	r.state.Offset = newOffset
	if errOut == nil && newOffset >= r.lim.MaxFileBytes {
		r.full = true
		errOut = fmt.Errorf("%w: over %d bytes", ErrTooLarge, r.lim.MaxFileBytes)
	}
	return len(add), errOut
}

// Package bounded reads stackstream's own binary formats (debuginfo values,
// the rollup's snapshots): varints and length-prefixed strings, from bytes
// that may be hostile. No length or count can ask for more than the bytes
// left, and the first error stops the reader: every read after it returns a
// zero value, so a decoder checks Err once at the end (or in its loops)
// instead of after every read.
package bounded

import (
	"encoding/binary"
	"fmt"
)

// Reader reads b. Its zero value reads nothing.
type Reader struct {
	b    []byte
	err  error
	kind error
}

// NewReader reads b; its errors wrap kind (a format's ErrBad... error).
func NewReader(b []byte, kind error) *Reader { return &Reader{b: b, kind: kind} }

// Err is the first error, or nil.
func (r *Reader) Err() error { return r.err }

// Len is the number of bytes left.
func (r *Reader) Len() int { return len(r.b) }

// Fail records an error (the first one stays) and stops the reader.
func (r *Reader) Fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", r.kind, fmt.Sprintf(format, args...))
	}
	r.b = nil
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.Fail("truncated varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Varint reads a signed varint.
func (r *Reader) Varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.Fail("truncated varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Count reads an element count, each element taking at least minBytes:
// a count the bytes left cannot hold fails.
func (r *Reader) Count(minBytes int) int {
	n := r.Uvarint()
	if n > uint64(len(r.b)/minBytes) {
		r.Fail("a count of %d with %d bytes left", n, len(r.b))
		return 0
	}
	return int(n)
}

// Bytes reads a length-prefixed byte string; the slice is b's.
func (r *Reader) Bytes() []byte {
	n := r.Uvarint()
	if n > uint64(len(r.b)) {
		r.Fail("truncated string")
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

// Str reads a length-prefixed string.
func (r *Reader) Str() string { return string(r.Bytes()) }

// Fixed reads n bytes; the slice is b's.
func (r *Reader) Fixed(n int) []byte {
	if n > len(r.b) {
		r.Fail("truncated: %d bytes wanted, %d left", n, len(r.b))
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

// Bool reads a byte that is 0 or 1.
func (r *Reader) Bool() bool {
	if len(r.b) == 0 || r.b[0] > 1 {
		r.Fail("bad flag")
		return false
	}
	v := r.b[0] == 1
	r.b = r.b[1:]
	return v
}

// AppendStr appends s with its length, as Str reads it.
func AppendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

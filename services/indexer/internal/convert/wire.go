package convert

import "github.com/stackstream/stackstream/pkg/pprofwire"

// lenField reads a length-delimited field whose one-byte key is key.
func lenField(b []byte, key byte) (data, rest []byte, ok bool) {
	if len(b) < 2 || b[0] != key {
		return nil, nil, false
	}
	l, n := pprofwire.Varint(b[1:])
	if n == 0 || l > uint64(len(b)-1-n) {
		return nil, nil, false
	}
	b = b[1+n:]
	return b[:l], b[l:], true
}

package convert

import "github.com/stackstream/stackstream/pkg/pprofwire"

// appendVarints appends a repeated varint field (packed or not) to dst.
func appendVarints[T int64 | uint64](dst []T, typ int, u uint64, data []byte) ([]T, bool) {
	if typ == 0 {
		return append(dst, T(u)), true
	}
	for len(data) > 0 {
		v, n := pprofwire.Varint(data)
		if n == 0 {
			return dst, false
		}
		dst = append(dst, T(v))
		data = data[n:]
	}
	return dst, true
}

// scalars reads a message whose fields are all varints numbered 1..len(dst),
// the last occurrence winning, as pprof does. It reads the two varints of a
// field itself rather than through field: functions, lines and labels are
// such messages, thousands per profile.
func scalars(b []byte, dst []*uint64) bool {
	for len(b) > 0 {
		key, n := pprofwire.Varint(b)
		if n == 0 || key&7 != 0 || key>>3 == 0 || key>>3 > uint64(len(dst)) {
			return false
		}
		u, m := pprofwire.Varint(b[n:])
		if m == 0 {
			return false
		}
		if p := dst[key>>3-1]; p != nil {
			*p = u
		}
		b = b[n+m:]
	}
	return true
}

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

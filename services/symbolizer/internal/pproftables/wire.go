package pproftables

import "github.com/stackstream/stackstream/pkg/pprofwire"

// scalars reads a message whose known fields are varints numbered
// 1..len(dst), the last occurrence winning, as pprof does. A nil dst entry
// is read and dropped. Fields past len(dst) are skipped as pprof skips
// unknown fields; a known one of another wire type is refused.
func scalars(b []byte, dst []*uint64) bool {
	for len(b) > 0 {
		num, typ, u, _, rest, ok := pprofwire.Field(b)
		if !ok {
			return false
		}
		b = rest
		if num == 0 || num > uint64(len(dst)) {
			continue
		}
		if typ != 0 {
			return false
		}
		if p := dst[num-1]; p != nil {
			*p = u
		}
	}
	return true
}

// varints calls fn for each value of a repeated varint field, packed or
// not; false when the packed data is not varints.
func varints(typ int, u uint64, data []byte, fn func(uint64)) bool {
	if typ == 0 {
		fn(u)
		return true
	}
	for len(data) > 0 {
		v, n := pprofwire.Varint(data)
		if n == 0 {
			return false
		}
		fn(v)
		data = data[n:]
	}
	return true
}

func appendVarint(b []byte, u uint64) []byte {
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}

// appendUint appends a varint field unless it is zero, as pprof's encoder
// leaves zero fields out.
func appendUint(b []byte, num int, u uint64) []byte {
	if u == 0 {
		return b
	}
	return appendVarint(append(b, byte(num<<3)), u)
}

func appendBool(b []byte, num int, v bool) []byte {
	if !v {
		return b
	}
	return append(b, byte(num<<3), 1)
}

// appendBytes appends a length-delimited field.
func appendBytes(b []byte, num int, data []byte) []byte {
	b = appendVarint(append(b, byte(num<<3|2)), uint64(len(data)))
	return append(b, data...)
}

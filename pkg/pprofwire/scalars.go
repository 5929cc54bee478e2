package pprofwire

// Scalars reads a message whose fields are all varints numbered 1..len(dst),
// the last occurrence winning, as pprof does; a nil dst entry skips its
// field. Functions, lines and labels are such messages, thousands a profile,
// so it reads the two varints of a field itself rather than through Field.
func Scalars(b []byte, dst []*uint64) bool {
	for len(b) > 0 {
		key, n := Varint(b)
		if n == 0 || key&7 != 0 || key>>3 == 0 || key>>3 > uint64(len(dst)) {
			return false
		}
		u, m := Varint(b[n:])
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

// AppendVarints appends the values of a repeated varint field, one value
// (wire type 0) or packed (wire type 2), as Field returned it.
func AppendVarints[T int64 | uint64](dst []T, typ int, u uint64, data []byte) ([]T, bool) {
	switch typ {
	case 0:
		return append(dst, T(u)), true
	case 2:
		for len(data) > 0 {
			v, n := Varint(data)
			if n == 0 {
				return dst, false
			}
			dst = append(dst, T(v))
			data = data[n:]
		}
		return dst, true
	}
	return dst, false
}

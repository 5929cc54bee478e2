package pprofwire

// Scalars reads a message whose known fields are varints numbered
// 1..len(dst), the last occurrence winning, as pprof does; a nil dst entry
// skips its field. A field past len(dst) is skipped, as pprof skips fields
// it does not define; a known one of another wire type is refused.
// Functions, lines and labels are such messages, thousands a profile, so
// it reads the two varints of a field itself rather than through Field.
func Scalars(b []byte, dst []*uint64) bool {
	for len(b) > 0 {
		key, n := Varint(b)
		if n == 0 {
			return false
		}
		if num := key >> 3; key&7 != 0 || num == 0 || num > uint64(len(dst)) {
			num, _, _, _, rest, ok := Field(b)
			if !ok || num != 0 && num <= uint64(len(dst)) {
				return false
			}
			b = rest
			continue
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

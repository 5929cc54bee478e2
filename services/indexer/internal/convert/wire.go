package convert

// varint decodes as pprof does: at most 10 bytes, extra high bits dropped.
func varint(b []byte) (uint64, int) {
	// Field keys, string and location indices, lengths: most varints of a
	// profile are one byte, and this test inlines where the loop does not.
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	return varintLong(b)
}

func varintLong(b []byte) (uint64, int) {
	var u uint64
	for i := 0; i < 10 && i < len(b); i++ {
		u |= uint64(b[i]&0x7f) << uint(7*i)
		if b[i]&0x80 == 0 {
			return u, i + 1
		}
	}
	return 0, 0
}

// field reads one protobuf field: its number, wire type, varint value or
// length-delimited bytes, and the rest. Other wire types give ok=false:
// every field pprof defines is a varint or bytes.
func field(b []byte) (num uint64, typ int, u uint64, data, rest []byte, ok bool) {
	key, n := varint(b)
	if n == 0 {
		return 0, 0, 0, nil, nil, false
	}
	b = b[n:]
	num, typ = key>>3, int(key&7)
	switch typ {
	case 0:
		u, n = varint(b)
		if n == 0 {
			return 0, 0, 0, nil, nil, false
		}
		return num, typ, u, nil, b[n:], true
	case 2:
		l, n := varint(b)
		if n == 0 || l > uint64(len(b)-n) {
			return 0, 0, 0, nil, nil, false
		}
		b = b[n:]
		return num, typ, 0, b[:l], b[l:], true
	}
	return 0, 0, 0, nil, nil, false
}

// appendVarints appends a repeated varint field (packed or not) to dst.
func appendVarints[T int64 | uint64](dst []T, typ int, u uint64, data []byte) ([]T, bool) {
	if typ == 0 {
		return append(dst, T(u)), true
	}
	for len(data) > 0 {
		v, n := varint(data)
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
		key, n := varint(b)
		if n == 0 || key&7 != 0 || key>>3 == 0 || key>>3 > uint64(len(dst)) {
			return false
		}
		u, m := varint(b[n:])
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
	l, n := varint(b[1:])
	if n == 0 || l > uint64(len(b)-1-n) {
		return nil, nil, false
	}
	b = b[1+n:]
	return b[:l], b[l:], true
}

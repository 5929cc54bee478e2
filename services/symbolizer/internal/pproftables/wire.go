package pproftables

// varint decodes as pprof does: at most 10 bytes, extra high bits dropped.
// n is 0 when b holds no complete varint.
func varint(b []byte) (u uint64, n int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
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
// every field pprof defines is a varint or bytes, and refusing the others
// only sends a profile to the full decoder.
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

// scalars reads a message whose known fields are varints numbered
// 1..len(dst), the last occurrence winning, as pprof does. A nil dst entry
// is read and dropped. Fields past len(dst) are skipped as pprof skips
// unknown fields; a known one of another wire type is refused.
func scalars(b []byte, dst []*uint64) bool {
	for len(b) > 0 {
		num, typ, u, _, rest, ok := field(b)
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
		v, n := varint(data)
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

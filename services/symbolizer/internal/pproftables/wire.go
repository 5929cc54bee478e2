package pproftables

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

// Package pprofwire reads the protobuf wire format of pprof profiles as pprof
// itself does, for the consumers that read a profile's tables without
// building a *profile.Profile: the rollup's Decoder, the indexer's fast
// converter and the symbolizer's table rewrite. Tables.Read is the one
// reading of a profile's fields, tables, IDs and limits, ReadSample of a
// sample's; each consumer builds its own from them, and leaves what Read
// refuses (ErrUnsupported) to google/pprof's parser.
package pprofwire

// Varint decodes as pprof does: at most 10 bytes, extra high bits dropped.
// n is 0 when b holds no complete varint.
func Varint(b []byte) (u uint64, n int) {
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

// Field reads one protobuf field: its number, wire type, varint value or
// length-delimited bytes, and the rest. Other wire types give ok=false:
// every field pprof defines is a varint or bytes.
func Field(b []byte) (num uint64, typ int, u uint64, data, rest []byte, ok bool) {
	key, n := Varint(b)
	if n == 0 {
		return 0, 0, 0, nil, nil, false
	}
	b = b[n:]
	num, typ = key>>3, int(key&7)
	switch typ {
	case 0:
		u, n = Varint(b)
		if n == 0 {
			return 0, 0, 0, nil, nil, false
		}
		return num, typ, u, nil, b[n:], true
	case 2:
		l, n := Varint(b)
		if n == 0 || l > uint64(len(b)-n) {
			return 0, 0, 0, nil, nil, false
		}
		b = b[n:]
		return num, typ, 0, b[:l], b[l:], true
	}
	return 0, 0, 0, nil, nil, false
}

package pprofwire

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestVarintField: every value protowire encodes reads back, truncated input
// and unsupported wire types are refused.
func TestVarintField(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 300, 1<<32 - 1, 1<<63 + 5, ^uint64(0)} {
		b := protowire.AppendVarint(nil, v)
		if u, n := Varint(b); u != v || n != len(b) {
			t.Errorf("Varint(%x) = %d, %d; want %d, %d", b, u, n, v, len(b))
		}
		if _, n := Varint(b[:len(b)-1]); n != 0 && len(b) > 1 {
			t.Errorf("truncated %x read as %d bytes", b[:len(b)-1], n)
		}
	}
	b := protowire.AppendTag(nil, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 42)
	b = protowire.AppendTag(b, 6, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("abc"))
	num, typ, u, _, rest, ok := Field(b)
	if !ok || num != 3 || typ != 0 || u != 42 {
		t.Fatalf("varint field: %d %d %d %v", num, typ, u, ok)
	}
	var data []byte
	num, typ, _, data, rest, ok = Field(rest)
	if !ok || num != 6 || typ != 2 || string(data) != "abc" || len(rest) != 0 {
		t.Fatalf("bytes field: %d %d %q %d %v", num, typ, data, len(rest), ok)
	}
	if _, _, _, _, _, ok := Field(protowire.AppendTag(nil, 1, protowire.Fixed64Type)); ok {
		t.Error("a fixed64 field was accepted")
	}
	long := protowire.AppendTag(nil, 1, protowire.BytesType)
	long = protowire.AppendVarint(long, 10)
	if _, _, _, _, _, ok := Field(append(long, 'x')); ok {
		t.Error("a length past the input was accepted")
	}
}

package bounded

import (
	"encoding/binary"
	"errors"
	"testing"
)

var errBad = errors.New("bad test format")

func TestReader(t *testing.T) {
	b := binary.AppendUvarint(nil, 7)
	b = binary.AppendVarint(b, -3)
	b = AppendStr(b, "frame")
	b = append(b, 1, 0xAB, 0xCD)
	r := NewReader(b, errBad)
	if r.Uvarint() != 7 || r.Varint() != -3 || r.Str() != "frame" || !r.Bool() || string(r.Fixed(2)) != "\xab\xcd" || r.Err() != nil || r.Len() != 0 {
		t.Fatalf("read back wrong: %v", r.Err())
	}
	for name, read := range map[string]func(*Reader){
		"count past the bytes": func(r *Reader) { r.Count(1) },
		"string past the end":  func(r *Reader) { r.Str() },
		"flag not 0 or 1":      func(r *Reader) { r.Bool() },
		"fixed past the end":   func(r *Reader) { r.Fixed(5) },
		"truncated varint":     func(r *Reader) { r.Uvarint() },
	} {
		bad := map[string][]byte{
			"count past the bytes": {9, 1}, "string past the end": {9, 'a'}, "flag not 0 or 1": {2},
			"fixed past the end": {1, 2}, "truncated varint": {0x80},
		}[name]
		r := NewReader(bad, errBad)
		read(r)
		if !errors.Is(r.Err(), errBad) || r.Len() != 0 || r.Uvarint() != 0 || r.Str() != "" {
			t.Errorf("%s: %v, and the reader goes on", name, r.Err())
		}
	}
}

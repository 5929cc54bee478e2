package pprofwire

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stackstream/stackstream/schemas/record"
)

// TestCheckAbove: no protobuf shorter than CheckAbove, made of the elements
// that cost the most per wire byte, passes a limit of record.DefaultLimits
// on the whole profile or on its heap estimate; and the records the
// symbolizer writes (up to 900 KiB) are below it.
func TestCheckAbove(t *testing.T) {
	l := record.DefaultLimits()
	above := CheckAbove(l)
	if above < 900<<10 {
		t.Fatalf("CheckAbove = %d: records the symbolizer writes (up to 900 KiB) would be walked twice", above)
	}
	for _, tc := range []struct {
		name string
		elem []byte
	}{
		{"samples with one label", []byte{0x12, 0x02, 0x1a, 0x00}},
		{"samples with two labels", []byte{0x12, 0x04, 0x1a, 0x00, 0x1a, 0x00}},
		{"empty samples", []byte{0x12, 0x00}},
		{"location references", []byte{0x12, 0x0a, 0x0a, 0x08, 1, 1, 1, 1, 1, 1, 1, 1}},
		{"functions", []byte{0x2a, 0x00}},
		{"locations with a line", []byte{0x22, 0x02, 0x22, 0x00}},
		{"strings", []byte{0x32, 0x00}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := bytes.Repeat(tc.elem, (above-1)/len(tc.elem))
			if err := l.Check(raw); errors.Is(err, record.ErrTooLarge) {
				t.Fatalf("%d bytes (< %d) pass a limit: %v", len(raw), above, err)
			}
		})
	}
}

package python

import (
	"encoding/binary"
	"io"
	"runtime"
	"testing"
)

// image is process memory for the fuzz targets: data mapped at base,
// nothing elsewhere.
type image struct {
	base uint64
	data []byte
}

func (m image) ReadAt(p []byte, off int64) (int, error) {
	o := uint64(off)
	if o < m.base || o-m.base > uint64(len(m.data)) || uint64(len(p)) > uint64(len(m.data))-(o-m.base) {
		return 0, io.EOF
	}
	return copy(p, m.data[o-m.base:]), nil
}

const (
	fuzzBase        = 0x10000
	fuzzCodeType    = 0xc0de0
	fuzzUnicodeType = 0x57100
	fuzzBytesType   = 0xb7e50
)

func fuzzProcess() *Process {
	l, _ := LayoutOf(Version{3, 11})
	return &Process{Layout: l, CodeType: fuzzCodeType, UnicodeType: fuzzUnicodeType, BytesType: fuzzBytesType}
}

// validImage is a code object at fuzzBase whose qualname, filename and line
// table follow it: the seed the fuzzer mutates.
func validImage() []byte {
	l := fuzzProcess().Layout
	le := binary.LittleEndian
	b := make([]byte, 512)
	le.PutUint64(b[objectType:], fuzzCodeType)
	le.PutUint32(b[l.CodeFirstLine:], 10)
	str := func(at int, s string) {
		le.PutUint64(b[at+objectType:], fuzzUnicodeType)
		le.PutUint64(b[at+int(l.UnicodeLength):], uint64(len(s)))
		le.PutUint32(b[at+int(l.UnicodeState):], 1<<2|1<<5|1<<6) // kind 1, compact, ascii
		copy(b[at+int(l.UnicodeASCII):], s)
	}
	str(200, "outer.<locals>.inner")
	le.PutUint64(b[l.CodeQualname:], fuzzBase+200)
	str(304, "/srv/app.py")
	le.PutUint64(b[l.CodeFilename:], fuzzBase+304)
	le.PutUint64(b[400+objectType:], fuzzBytesType)
	table := []byte{0x80 | 13<<3 | 1, 2, 0x80 | 11<<3 | 3, 4, 5}
	le.PutUint64(b[400+int(l.BytesSize):], uint64(len(table)))
	copy(b[400+int(l.BytesData):], table)
	le.PutUint64(b[l.CodeLinetable:], fuzzBase+400)
	return b
}

// FuzzReadCode: any memory image gives a code object within the limits or
// an error, and reading allocates little more than the limits allow.
func FuzzReadCode(f *testing.F) {
	f.Add(validImage(), 3)
	f.Add([]byte{}, 0)
	lim := Limits{MaxStringBytes: 256, MaxLineTableBytes: 4096}
	p := fuzzProcess()
	f.Fuzz(func(t *testing.T, data []byte, instr int) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c, err := ReadCode(image{fuzzBase, data}, p, fuzzBase, lim)
		runtime.ReadMemStats(&after)
		// The header, two str headers, two names of at most 4 bytes a
		// character, the table, the results, and slack for the runtime.
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Fatalf("%d bytes allocated", n)
		}
		if err != nil {
			return
		}
		if len(c.Qualname) > lim.MaxStringBytes || len(c.Filename) > lim.MaxStringBytes || len(c.LineTable) > lim.MaxLineTableBytes {
			t.Fatalf("over the limits: %d, %d, %d bytes", len(c.Qualname), len(c.Filename), len(c.LineTable))
		}
		c.Line(instr)
	})
}

// FuzzLineOf: any table and code unit; LineOf never allocates.
func FuzzLineOf(f *testing.F) {
	f.Add([]byte{0x80 | 13<<3 | 1, 2, 0x80 | 11<<3 | 3, 4, 5}, 10, 3)
	f.Add([]byte{0xf8, 0x41}, 1, 0)
	f.Fuzz(func(t *testing.T, table []byte, first, instr int) {
		if n := testing.AllocsPerRun(1, func() { LineOf(table, first, instr) }); n != 0 {
			t.Fatalf("%v allocations", n)
		}
	})
}

// TestValidImage: the fuzz seed decodes as built.
func TestValidImage(t *testing.T) {
	c, err := ReadCode(image{fuzzBase, validImage()}, fuzzProcess(), fuzzBase, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	// Units 0-1: line 10+1; units 2-5: one more line.
	if c.Qualname != "outer.<locals>.inner" || c.Filename != "/srv/app.py" || c.Line(0) != 11 || c.Line(3) != 12 || c.Line(9) != 10 {
		t.Errorf("%q %q lines %d %d %d", c.Qualname, c.Filename, c.Line(0), c.Line(3), c.Line(9))
	}
}

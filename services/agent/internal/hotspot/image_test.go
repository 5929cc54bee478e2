package hotspot

import (
	"encoding/binary"
	"io"
	"sort"
)

// image is process memory for the tests: data mapped at base, nothing
// elsewhere.
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

const imageBase = 0x10000

// builder lays out memory from imageBase: words and strings appended.
type builder struct {
	data []byte
}

func (b *builder) addr() uint64 { return imageBase + uint64(len(b.data)) }

func (b *builder) alloc(n int) uint64 {
	a := b.addr()
	b.data = append(b.data, make([]byte, (n+7)&^7)...)
	return a
}

// pad ends the memory on a page boundary, as mapped memory does.
func (b *builder) pad() { b.data = append(b.data, make([]byte, (4096-len(b.data)%4096)%4096)...) }

func (b *builder) put64(at, v uint64) { binary.LittleEndian.PutUint64(b.data[at-imageBase:], v) }
func (b *builder) put32(at uint64, v uint32) {
	binary.LittleEndian.PutUint32(b.data[at-imageBase:], v)
}
func (b *builder) put16(at uint64, v uint16) {
	binary.LittleEndian.PutUint16(b.data[at-imageBase:], v)
}

func (b *builder) str(s string) uint64 {
	a := b.alloc(len(s) + 1)
	copy(b.data[a-imageBase:], s)
	return a
}

// tables is what a tables image describes.
type tables struct {
	fields map[string]Field // "Type.field"
	types  map[string]uint64
	ints   map[string]int64
	longs  map[string]int64
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// tablesImage lays out the four tables as HotSpot does (entries of 48,
// 48, 16 and 16 bytes ending with a NULL name) and the exported symbols
// before them; it returns the memory and the symbols' addresses.
func tablesImage(tb tables) (*builder, map[string]uint64) {
	b := &builder{}
	syms := map[string]uint64{}
	for _, s := range tableSymbols {
		syms[s] = b.alloc(8)
	}
	set := func(name string, v uint64) { b.put64(syms[name], v) }
	// VMStructEntry: typeName, fieldName, typeString, isStatic (int32),
	// offset, address.
	set("gHotSpotVMStructEntryArrayStride", 48)
	set("gHotSpotVMStructEntryTypeNameOffset", 0)
	set("gHotSpotVMStructEntryFieldNameOffset", 8)
	set("gHotSpotVMStructEntryIsStaticOffset", 24)
	set("gHotSpotVMStructEntryOffsetOffset", 32)
	set("gHotSpotVMStructEntryAddressOffset", 40)
	keys := sortedKeys(tb.fields)
	arr := b.alloc(48 * (len(keys) + 1))
	set(symStructs, arr)
	for i, k := range keys {
		f := tb.fields[k]
		e := arr + uint64(48*i)
		typ, field := k, ""
		for j := len(k) - 1; j >= 0; j-- {
			if k[j] == '.' {
				typ, field = k[:j], k[j+1:]
				break
			}
		}
		b.put64(e, b.str(typ))
		b.put64(e+8, b.str(field))
		if f.Static {
			b.put32(e+24, 1)
		}
		b.put64(e+32, f.Offset)
		b.put64(e+40, f.Address)
	}
	// VMTypeEntry: typeName, superclassName, isOop, isInteger, isUnsigned
	// (int32 each), size.
	set("gHotSpotVMTypeEntryArrayStride", 48)
	set("gHotSpotVMTypeEntryTypeNameOffset", 0)
	set("gHotSpotVMTypeEntrySizeOffset", 32)
	keys = sortedKeys(tb.types)
	arr = b.alloc(48 * (len(keys) + 1))
	set(symTypes, arr)
	for i, k := range keys {
		e := arr + uint64(48*i)
		b.put64(e, b.str(k))
		b.put64(e+32, tb.types[k])
	}
	for _, c := range []struct {
		table, prefix string
		m             map[string]int64
	}{{symInts, "gHotSpotVMIntConstantEntry", tb.ints}, {symLongs, "gHotSpotVMLongConstantEntry", tb.longs}} {
		set(c.prefix+"ArrayStride", 16)
		set(c.prefix+"NameOffset", 0)
		set(c.prefix+"ValueOffset", 8)
		keys = sortedKeys(c.m)
		arr = b.alloc(16 * (len(keys) + 1))
		set(c.table, arr)
		for i, k := range keys {
			e := arr + uint64(16*i)
			b.put64(e, b.str(k))
			b.put64(e+8, uint64(c.m[k]))
		}
	}
	b.pad()
	return b, syms
}

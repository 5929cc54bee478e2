package v8

import (
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"unicode/utf16"
)

// node20Values are the v8dbg_ values of Debian's node 20 (V8 11.3) that
// the reader uses, as TestReadFileNode reads them from /usr/bin/node.
func node20Values() map[string]int64 {
	return map[string]int64{
		"off_fp_context_or_frame_type": -8, "off_fp_context": -8, "off_fp_function": -16,
		"HeapObjectTag": 1, "HeapObjectTagMask": 3, "SmiTagMask": 1, "SmiShiftSize": 31, "TaggedSize": 8,
		"class_HeapObject__map__Map": 0, "class_Map__instance_type__uint16_t": 12,
		"class_JSFunction__shared__SharedFunctionInfo":               24,
		"class_SharedFunctionInfo__name_or_scope_info__Object":       16,
		"class_SharedFunctionInfo__script_or_debug_info__HeapObject": 32,
		"class_Script__name__Object":                                 16, "class_Script__source__Object": 8, "class_Script__line_ends__Object": 56,
		"class_FixedArrayBase__length__SMI": 8, "class_FixedArray__data__uintptr_t": 16,
		"scopeinfo_idx_ncontextlocals": 2, "scopeinfo_idx_first_vars": 3, "parent_ScopeInfo__HeapObject": 0,
		"class_String__length__int32_t": 12, "class_SeqOneByteString__chars__char": 16, "class_SeqTwoByteString__chars__char": 16,
		"class_ConsString__first__String": 16, "class_ConsString__second__String": 24, "class_ThinString__actual__String": 16,
		"class_SlicedString__parent__String": 16, "class_SlicedString__offset__SMI": 24,
		"FirstNonstringType": 128, "StringEncodingMask": 8, "OneByteStringTag": 8, "TwoByteStringTag": 0,
		"StringRepresentationMask": 7, "SeqStringTag": 0, "ConsStringTag": 1, "ExternalStringTag": 2, "SlicedStringTag": 3, "ThinStringTag": 5,
		"type_JSFunction__JS_FUNCTION_TYPE": 2066, "type_JSAtomicsCondition__JS_ATOMICS_CONDITION_TYPE": 2097,
		"type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE": 262, "type_ScopeInfo__SCOPE_INFO_TYPE": 261,
		"type_Script__SCRIPT_TYPE": 167, "type_FixedArray__FIXED_ARRAY_TYPE": 175, "type_Oddball__ODDBALL_TYPE": 131,
	}
}

func node20(t testing.TB) *Metadata {
	m, err := newMetadata(node20Values())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

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

const imageBase = 0x100000

// heapBuilder lays out V8 objects of node 20's shapes in an image; each
// function returns a tagged pointer.
type heapBuilder struct {
	data []byte
	maps map[uint16]uint64
}

func newHeapBuilder() *heapBuilder { return &heapBuilder{maps: map[uint16]uint64{}} }

func (b *heapBuilder) alloc(n int) uint64 {
	a := imageBase + uint64(len(b.data))
	b.data = append(b.data, make([]byte, (n+7)&^7)...)
	return a
}

func (b *heapBuilder) put(a uint64, off int, v uint64) {
	binary.LittleEndian.PutUint64(b.data[a-imageBase+uint64(off):], v)
}

func smi(v int64) uint64 { return uint64(v) << 32 }

// object allocates n bytes whose map has instance type t.
func (b *heapBuilder) object(t uint16, n int) uint64 {
	mp, ok := b.maps[t]
	if !ok {
		a := b.alloc(16)
		binary.LittleEndian.PutUint16(b.data[a-imageBase+12:], t)
		mp = a + 1
		b.maps[t] = mp
	}
	a := b.alloc(n)
	b.put(a, 0, mp)
	return a
}

func (b *heapBuilder) setLen(a uint64, n int) {
	binary.LittleEndian.PutUint32(b.data[a-imageBase+12:], uint32(n))
}

func (b *heapBuilder) oneByte(s string) uint64 {
	a := b.object(8, 16+len(s))
	b.setLen(a, len(s))
	copy(b.data[a-imageBase+16:], s)
	return a + 1
}

func (b *heapBuilder) twoByte(s string) uint64 {
	u := utf16.Encode([]rune(s))
	a := b.object(0, 16+2*len(u))
	b.setLen(a, len(u))
	for i, c := range u {
		binary.LittleEndian.PutUint16(b.data[a-imageBase+16+uint64(2*i):], c)
	}
	return a + 1
}

func (b *heapBuilder) cons(first, second uint64, n int) uint64 {
	a := b.object(1|8, 32)
	b.setLen(a, n)
	b.put(a, 16, first)
	b.put(a, 24, second)
	return a + 1
}

func (b *heapBuilder) thin(actual uint64, n int) uint64 {
	a := b.object(5|8, 24)
	b.setLen(a, n)
	b.put(a, 16, actual)
	return a + 1
}

func (b *heapBuilder) sliced(parent uint64, off, n int) uint64 {
	a := b.object(3|8, 32)
	b.setLen(a, n)
	b.put(a, 16, parent)
	b.put(a, 24, smi(int64(off)))
	return a + 1
}

func (b *heapBuilder) undefined() uint64 { return b.object(131, 16) + 1 }

func (b *heapBuilder) fixedArray(vals ...uint64) uint64 {
	a := b.object(175, 16+8*len(vals))
	b.put(a, 8, smi(int64(len(vals))))
	for i, v := range vals {
		b.put(a, 16+8*i, v)
	}
	return a + 1
}

func (b *heapBuilder) script(name, source, lineEnds uint64) uint64 {
	a := b.object(167, 104)
	b.put(a, 8, source)
	b.put(a, 16, name)
	b.put(a, 56, lineEnds)
	return a + 1
}

// scopeInfo: V8 11's layout, flags with function_variable UNUSED and an
// inferred name slot; locals context locals (names and infos).
func (b *heapBuilder) scopeInfo(locals int, name, inferred uint64, start, end int64) uint64 {
	const flags = 2 | 1<<6 | 3<<7 | 3<<12 | 1<<14 | 1<<16 | 1<<22
	slots := []uint64{smi(flags), smi(1), smi(int64(locals))}
	if locals < maxInlinedLocalNames {
		for range locals {
			slots = append(slots, b.oneByte("local"))
		}
	} else {
		slots = append(slots, b.fixedArray()) // the names' hash table
	}
	for range locals {
		slots = append(slots, smi(0))
	}
	slots = append(slots, name, smi(-1), inferred, smi(start), smi(end), b.undefined())
	a := b.object(261, 8+8*len(slots))
	for i, v := range slots {
		b.put(a, 8+8*i, v)
	}
	return a + 1
}

func (b *heapBuilder) sfi(nameOrScope, script uint64) uint64 {
	a := b.object(262, 56)
	b.put(a, 16, nameOrScope)
	b.put(a, 32, script)
	return a + 1
}

func (b *heapBuilder) image() image { return image{imageBase, b.data} }

const source = "'use strict';\nfunction hotJsFn(n) {\n  return n;\n}\n"

func TestReadFunction(t *testing.T) {
	m := node20(t)
	for _, c := range []struct {
		name  string
		build func(b *heapBuilder) uint64
		want  Function
		err   error
	}{
		{"name string", func(b *heapBuilder) uint64 {
			return b.sfi(b.oneByte("lazyFn"), b.script(b.oneByte("/srv/app.js"), b.undefined(), b.undefined()))
		}, Function{Name: "lazyFn", Script: "/srv/app.js"}, nil},
		{"scope info, line from source", func(b *heapBuilder) uint64 {
			sc := b.script(b.oneByte("/srv/app.js"), b.oneByte(source), b.undefined())
			return b.sfi(b.scopeInfo(2, b.oneByte("hotJsFn"), b.undefined(), 30, 48), sc)
		}, Function{Name: "hotJsFn", Script: "/srv/app.js", Line: 2}, nil},
		{"scope info, line from line ends", func(b *heapBuilder) uint64 {
			sc := b.script(b.oneByte("/srv/app.js"), b.undefined(), b.fixedArray(smi(13), smi(36), smi(48), smi(50)))
			return b.sfi(b.scopeInfo(0, b.oneByte("hotJsFn"), b.undefined(), 40, 48), sc)
		}, Function{Name: "hotJsFn", Script: "/srv/app.js", Line: 3}, nil},
		{"scope info, inferred name", func(b *heapBuilder) uint64 {
			return b.sfi(b.scopeInfo(1, 0, b.oneByte("obj.method"), 1, 2), b.undefined())
		}, Function{Name: "obj.method"}, nil},
		{"scope info, many locals", func(b *heapBuilder) uint64 {
			return b.sfi(b.scopeInfo(80, b.oneByte("big"), b.undefined(), 1, 2), b.undefined())
		}, Function{Name: "big"}, nil},
		{"anonymous", func(b *heapBuilder) uint64 {
			return b.sfi(smi(0), b.script(b.oneByte("node:internal/main"), b.undefined(), b.undefined()))
		}, Function{Script: "node:internal/main"}, nil},
		{"two-byte name", func(b *heapBuilder) uint64 {
			return b.sfi(b.twoByte("héllo😀"), b.undefined())
		}, Function{Name: "héllo😀"}, nil},
		{"cons name", func(b *heapBuilder) uint64 {
			return b.sfi(b.cons(b.oneByte("get "), b.twoByte("ñame"), 8), b.undefined())
		}, Function{Name: "get ñame"}, nil},
		{"thin name", func(b *heapBuilder) uint64 {
			return b.sfi(b.thin(b.oneByte("thinName"), 8), b.undefined())
		}, Function{Name: "thinName"}, nil},
		{"sliced script name", func(b *heapBuilder) uint64 {
			return b.sfi(b.oneByte("f"), b.script(b.sliced(b.oneByte("xx/srv/a.jsyy"), 2, 9), b.undefined(), b.undefined()))
		}, Function{Name: "f", Script: "/srv/a.js"}, nil},
		{"not a SharedFunctionInfo", func(b *heapBuilder) uint64 { return b.oneByte("x") }, Function{}, ErrInvalid},
		{"untagged", func(b *heapBuilder) uint64 { return imageBase }, Function{}, ErrInvalid},
		{"unmapped", func(b *heapBuilder) uint64 { return 0x7000_0001 }, Function{}, ErrInvalid},
		{"external name", func(b *heapBuilder) uint64 {
			a := b.object(2|8, 32)
			b.setLen(a, 4)
			return b.sfi(a+1, b.undefined())
		}, Function{}, ErrUnsupported},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newHeapBuilder()
			sfi := c.build(b)
			got, err := ReadFunction(b.image(), m, sfi, DefaultReadLimits)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("error %v, want %v", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *got != c.want {
				t.Errorf("got %+v, want %+v", *got, c.want)
			}
		})
	}
}

// TestStringLimits: names are cut at a character boundary within the byte
// limit, and a cons string's pieces are bounded.
func TestStringLimits(t *testing.T) {
	m := node20(t)
	b := newHeapBuilder()
	long := b.sfi(b.twoByte(strings.Repeat("é", 100)), b.undefined())
	s := b.oneByte("ab")
	for i := range 200 {
		s = b.cons(s, b.oneByte("ab"), 2*(i+2))
	}
	lim := ReadLimits{MaxStringBytes: 11, MaxStringParts: 8, MaxLineEnds: 16, MaxSourceBytes: 64}
	fn, err := ReadFunction(b.image(), m, long, lim)
	if err != nil || fn.Name != strings.Repeat("é", 5) {
		t.Errorf("long name: %q, %v", fn.Name, err)
	}
	h := &heap{mem: b.image(), m: m, lim: lim}
	if name, err := h.string(s); err != nil || name != "" {
		t.Errorf("a cons string 200 deep, 8 pieces followed: %q, %v", name, err)
	}
}

// TestMetadataChecks: missing or unusable metadata is refused.
func TestMetadataChecks(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(map[string]int64)
		err  error
	}{
		{"missing frame slot", func(v map[string]int64) { delete(v, "off_fp_function") }, ErrNotV8},
		{"pointer compression", func(v map[string]int64) { v["TaggedSize"] = 4 }, ErrUnsupported},
		{"field out of range", func(v map[string]int64) { v["class_Script__name__Object"] = 1 << 20 }, ErrInvalid},
		{"scope info slots", func(v map[string]int64) { v["scopeinfo_idx_first_vars"] = 0 }, ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := node20Values()
			c.edit(v)
			if _, err := newMetadata(v); !errors.Is(err, c.err) {
				t.Errorf("error %v, want %v", err, c.err)
			}
		})
	}
	m := node20(t)
	if m.TypeJSFunctionN != 31 || m.scopeInfoBase != 8 {
		t.Errorf("JSFunction types %d, scope info base %d", m.TypeJSFunctionN, m.scopeInfoBase)
	}
}

// FuzzReadFunction: any memory image gives a function within the limits
// or an error, and reading allocates little more than the limits allow.
func FuzzReadFunction(f *testing.F) {
	b := newHeapBuilder()
	sc := b.script(b.cons(b.oneByte("/srv/"), b.twoByte("äpp.js"), 11), b.oneByte(source), b.undefined())
	sfi := b.sfi(b.scopeInfo(1, b.thin(b.oneByte("hotJsFn"), 7), b.undefined(), 30, 48), sc)
	f.Add(b.image().data, sfi-imageBase)
	f.Add([]byte{}, uint64(1))
	m := node20(f)
	lim := ReadLimits{MaxStringBytes: 256, MaxStringParts: 16, MaxLineEnds: 4096, MaxSourceBytes: 4096}
	f.Fuzz(func(t *testing.T, data []byte, off uint64) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fn, err := ReadFunction(image{imageBase, data}, m, imageBase+off, lim)
		runtime.ReadMemStats(&after)
		// Two names and a source prefix, each at most 4 bytes a character
		// while decoding, headers, and slack for the runtime.
		if n := after.TotalAlloc - before.TotalAlloc; n > 128<<10 {
			t.Fatalf("%d bytes allocated", n)
		}
		if err != nil {
			return
		}
		if len(fn.Name) > lim.MaxStringBytes || len(fn.Script) > lim.MaxStringBytes {
			t.Fatalf("over the limits: %d, %d bytes", len(fn.Name), len(fn.Script))
		}
	})
}

package hotspot

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// methodImage lays out a Method of class java/lang/String named name with
// signature sig, compiled from String.java, with the layout of HotSpot 17;
// it returns the memory and the Method's address.
func methodImage(l Layout, name, sig string) (*builder, uint64) {
	b := &builder{}
	sym := func(s string) uint64 {
		a := b.alloc(int(l.SymbolBody) + len(s))
		b.put16(a+l.SymbolLength, uint16(len(s)))
		copy(b.data[a-imageBase+l.SymbolBody:], s)
		return a
	}
	klass := b.alloc(64)
	b.put64(klass+l.KlassName, sym("java/lang/String"))
	cp := b.alloc(int(l.PoolSize) + 8*8)
	b.put64(cp+l.PoolHolder, klass)
	b.put32(cp+l.PoolLength, 8)
	b.put16(cp+l.PoolSourceFile, 5)
	b.put64(cp+l.PoolSize+8*3, sym(name))
	b.put64(cp+l.PoolSize+8*4, sym(sig))
	b.put64(cp+l.PoolSize+8*5, sym("String.java"))
	cm := b.alloc(64)
	b.put64(cm+l.ConstMethodPool, cp)
	b.put16(cm+l.ConstMethodName, 3)
	b.put16(cm+l.ConstMethodSig, 4)
	m := b.alloc(88)
	b.put64(m+l.MethodConstMethod, cm)
	b.pad()
	return b, m
}

func layout17(t testing.TB) Layout {
	b, syms := tablesImage(jdk17())
	vm, err := ReadVMStructs(image{imageBase, b.data}, syms, DefaultTableLimits)
	if err != nil {
		t.Fatal(err)
	}
	l, err := layoutOf(vm)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestReadMethod(t *testing.T) {
	l := layout17(t)
	for _, c := range []struct {
		name   string
		change func(b *builder, m uint64)
		lim    ReadLimits
		want   string
		err    error
	}{
		{name: "named", want: "java.lang.String.hashCode ()I String.java"},
		{name: "cut", lim: ReadLimits{MaxSymbol: 4}, want: "java.hash ()I Stri"},
		{name: "null ConstMethod", change: func(b *builder, m uint64) { b.put64(m+l.MethodConstMethod, 0) }, err: ErrInvalid},
		{name: "unmapped", change: func(b *builder, m uint64) { b.put64(m+l.MethodConstMethod, 1<<40) }, err: ErrInvalid},
		{name: "index past the pool", change: func(b *builder, m uint64) {
			cm := uint64(0)
			for i := range 8 {
				cm |= uint64(b.data[m-imageBase+l.MethodConstMethod+uint64(i)]) << (8 * i)
			}
			b.put16(cm+l.ConstMethodName, 9)
		}, err: ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, m := methodImage(l, "hashCode", "()I")
			if c.change != nil {
				c.change(b, m)
			}
			lim := c.lim
			if lim.MaxSymbol == 0 {
				lim = DefaultReadLimits
			}
			got, err := ReadMethod(image{imageBase, b.data}, l, m, lim)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("%v, want %v", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := got.Function() + " " + got.Signature + " " + got.File; s != c.want {
				t.Errorf("%q, want %q", s, c.want)
			}
		})
	}
}

// FuzzReadMethod: any memory gives a method within the limits or an
// error, allocating little.
func FuzzReadMethod(f *testing.F) {
	l := layout17(f)
	b, m := methodImage(l, "hashCode", "()I")
	f.Add(b.data, m-imageBase)
	lim := ReadLimits{MaxSymbol: 128}
	f.Fuzz(func(t *testing.T, data []byte, at uint64) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, err := ReadMethod(image{imageBase, data}, l, imageBase+at, lim)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 16<<10 {
			t.Fatalf("%d bytes allocated", n)
		}
		if err != nil {
			return
		}
		if len(got.Name) > lim.MaxSymbol || len(got.Signature) > lim.MaxSymbol || len(got.File) > lim.MaxSymbol ||
			len(got.Class) > lim.MaxSymbol || strings.Contains(got.Class, "/") {
			t.Fatalf("%+v", got)
		}
	})
}

// TestFindBlob: the segment map walked back to a block's start, as
// HotSpot writes it (0 at the start, then 1..254 repeating), 0xff free.
func TestFindBlob(t *testing.T) {
	b := &builder{}
	const segments, log2 = 600, 7
	segmap := b.alloc(segments)
	m := b.data[segmap-imageBase:]
	m[0] = 0 // a block of 2 segments
	m[1] = 1
	m[2] = 0 // a block of 597 segments
	for i := 1; i < 597; i++ {
		m[2+i] = byte((i-1)%254 + 1)
	}
	m[599] = 0xff
	b.pad()
	const low = 0x7f0000000000
	p := &Process{Layout: Layout{HeapBlock: 16}, Heaps: []Heap{{Low: low, High: low + segments<<log2, Segmap: segmap, Log2Segment: log2}}}
	for _, c := range []struct {
		pc   uint64
		blob uint64
		ok   bool
	}{
		{low + 5, low + 16, true},
		{low + 1<<log2 + 100, low + 16, true},
		{low + 2<<log2, low + 2<<log2 + 16, true},
		{low + 598<<log2 + 3, low + 2<<log2 + 16, true},
		{low + 599<<log2, 0, false},      // free
		{low + segments<<log2, 0, false}, // past the heap
	} {
		blob, ok := FindBlob(image{imageBase, b.data}, p, c.pc)
		if blob != c.blob || ok != c.ok {
			t.Errorf("pc %#x: %#x %v, want %#x %v", c.pc, blob, ok, c.blob, c.ok)
		}
	}
}

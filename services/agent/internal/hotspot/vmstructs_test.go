package hotspot

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// jdk17 are the entries of HotSpot 17.0.15 (Debian) the agent uses, as
// that JVM exports them; statics get addresses in the image.
func jdk17() tables {
	f := func(o uint64) Field { return Field{Offset: o} }
	return tables{
		fields: map[string]Field{
			"CodeBlob._code_begin": f(32), "CodeBlob._frame_complete_offset": f(20), "CodeBlob._frame_size": f(28),
			"CodeBlob._name": f(96), "CompiledMethod._method": f(112),
			"CodeHeap._log2_segment_size": f(256), "CodeHeap._memory": f(8), "CodeHeap._segmap": f(120),
			"ConstMethod._constants": f(8), "ConstMethod._name_index": f(34), "ConstMethod._signature_index": f(36),
			"ConstantPool._pool_holder": f(24), "ConstantPool._source_file_name_index": f(54), "ConstantPool._length": f(60),
			"GrowableArray<int>._data": f(8), "GrowableArrayBase._len": f(0),
			"Klass._name": f(24), "Method._constMethod": f(8),
			"StubQueue._buffer_limit": f(20), "StubQueue._stub_buffer": f(8),
			"Symbol._body": f(6), "Symbol._length": f(4),
			"VirtualSpace._high_boundary": f(8), "VirtualSpace._low_boundary": f(0),
			"CodeCache._heaps": {Static: true}, "CodeCache._low_bound": {Static: true}, "CodeCache._high_bound": {Static: true},
			"AbstractInterpreter._code": {Static: true},
		},
		types: map[string]uint64{"HeapBlock": 16, "ConstantPool": 72, "Method": 88, "Symbol": 8},
		ints: map[string]int64{"frame::interpreter_frame_sender_sp_offset": -1, "frame::interpreter_frame_last_sp_offset": -2,
			"frame::arg_reg_save_area_bytes": 0},
		longs: map[string]int64{"markWord::hash_mask": 0x7fffffff},
	}
}

func TestReadVMStructs(t *testing.T) {
	want := jdk17()
	want.fields["CodeCache._heaps"] = Field{Static: true, Address: 0x7f0000001000}
	b, syms := tablesImage(want)
	vm, err := ReadVMStructs(image{imageBase, b.data}, syms, DefaultTableLimits)
	if err != nil {
		t.Fatal(err)
	}
	if len(vm.Fields) != len(want.fields) || len(vm.Types) != len(want.types) || len(vm.Ints) != len(want.ints) || len(vm.Longs) != len(want.longs) {
		t.Fatalf("%d fields, %d types, %d ints, %d longs", len(vm.Fields), len(vm.Types), len(vm.Ints), len(vm.Longs))
	}
	for k, f := range want.fields {
		if vm.Fields[k] != f {
			t.Errorf("%s: %+v, want %+v", k, vm.Fields[k], f)
		}
	}
	for k, v := range want.types {
		if vm.Types[k] != v {
			t.Errorf("sizeof(%s) %d, want %d", k, vm.Types[k], v)
		}
	}
	if vm.Ints["frame::interpreter_frame_sender_sp_offset"] != -1 || vm.Longs["markWord::hash_mask"] != 0x7fffffff {
		t.Errorf("constants %v %v", vm.Ints, vm.Longs)
	}
	l, err := layoutOf(vm)
	if err != nil {
		t.Fatal(err)
	}
	if l.NmethodMethod != 112 || l.BlobKind != 0xffff || l.FrameCompleteBytes != 4 || l.CodeIsOffset || l.InterpMethod != -24 || l.InterpSenderSP != -8 {
		t.Errorf("layout %+v", l)
	}
}

func TestReadVMStructsLimits(t *testing.T) {
	tb := jdk17()
	for _, c := range []struct {
		name   string
		lim    TableLimits
		change func(b *builder, syms map[string]uint64)
		want   error
	}{
		{"entries", TableLimits{MaxEntries: 10, MaxName: 256, MaxReadBytes: 1 << 20, MaxStride: 256}, nil, ErrTooLarge},
		{"bytes", TableLimits{MaxEntries: 1000, MaxName: 256, MaxReadBytes: 4096, MaxStride: 256}, nil, ErrTooLarge},
		{"stride", DefaultTableLimits, func(b *builder, syms map[string]uint64) {
			b.put64(syms["gHotSpotVMStructEntryArrayStride"], 1<<20)
		}, ErrInvalid},
		{"offset past stride", DefaultTableLimits, func(b *builder, syms map[string]uint64) {
			b.put64(syms["gHotSpotVMTypeEntrySizeOffset"], 44)
		}, ErrInvalid},
		{"long name", DefaultTableLimits, func(b *builder, syms map[string]uint64) {
			arr := uint64(0)
			for i := range 8 {
				arr |= uint64(b.data[syms[symTypes]-imageBase+uint64(i)]) << (8 * i)
			}
			b.put64(arr, b.str(strings.Repeat("x", 300)))
		}, ErrInvalid},
		{"no symbol", DefaultTableLimits, func(b *builder, syms map[string]uint64) { delete(syms, symLongs) }, ErrNotJVM},
		{"table pointer", DefaultTableLimits, func(b *builder, syms map[string]uint64) { b.put64(syms[symInts], 1<<50) }, ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, syms := tablesImage(tb)
			if c.change != nil {
				c.change(b, syms)
			}
			_, err := ReadVMStructs(image{imageBase, b.data}, syms, c.lim)
			if !errors.Is(err, c.want) {
				t.Fatalf("%v, want %v", err, c.want)
			}
		})
	}
}

// FuzzReadVMStructs: any memory behind the symbols gives tables or an
// error, allocating little more than the read budget.
func FuzzReadVMStructs(f *testing.F) {
	b, syms := tablesImage(jdk17())
	f.Add(b.data)
	f.Add([]byte{})
	lim := TableLimits{MaxEntries: 512, MaxName: 64, MaxReadBytes: 64 << 10, MaxStride: 128}
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		vm, err := ReadVMStructs(image{imageBase, data}, syms, lim)
		if err == nil {
			layoutOf(vm)
		}
		runtime.ReadMemStats(&after)
		// The reads (at most the budget), four maps of at most 512 entries
		// of names of at most 64 bytes, and slack for the runtime.
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Fatalf("%d bytes allocated", n)
		}
		if err != nil {
			return
		}
		if len(vm.Fields) > lim.MaxEntries || len(vm.Types) > lim.MaxEntries || len(vm.Ints) > lim.MaxEntries || len(vm.Longs) > lim.MaxEntries {
			t.Fatalf("over the limits: %d %d %d %d", len(vm.Fields), len(vm.Types), len(vm.Ints), len(vm.Longs))
		}
	})
}

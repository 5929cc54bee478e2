package hotspot

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/stackstream/stackstream/bpf/profiler"
)

// Interpreter frame slots of HotSpot on x86-64, in words from rbp
// (src/hotspot/cpu/x86/frame_x86.hpp, the same in 17 and 25): the sender's
// sp at -1 (exported as frame::interpreter_frame_sender_sp_offset), the
// last sp at -2 (exported), the Method* at -3 (not exported: one below the
// last sp).
const (
	interpreterSenderSPSlot = -1
	interpreterMethodSlot   = -3
)

// Layout is where HotSpot keeps what the agent reads, from its vmStructs.
type Layout struct {
	// Code blobs.
	HeapBlock          uint64 // sizeof(HeapBlock): the header before a blob
	BlobName           uint64 // CodeBlob::_name
	BlobFrameSize      uint64 // CodeBlob::_frame_size
	BlobFrameComplete  uint64 // CodeBlob::_frame_complete_offset
	FrameCompleteBytes uint64 // 4 (int) before HotSpot 23, then 2
	BlobCode           uint64 // CodeBlob::_code_begin or _code_offset
	CodeIsOffset       bool   // _code_offset (HotSpot 23+)
	BlobKind           uint64 // CodeBlob::_kind; profiler.HotSpotNoField before 23
	NmethodKind        uint64 // CodeBlobKind::Nmethod
	NmethodMethod      uint64 // nmethod::_method (CompiledMethod:: before 21)

	// Metadata, for names.
	MethodConstMethod uint64 // Method::_constMethod
	ConstMethodPool   uint64 // ConstMethod::_constants
	ConstMethodName   uint64 // ConstMethod::_name_index (u2)
	ConstMethodSig    uint64 // ConstMethod::_signature_index (u2)
	PoolHolder        uint64 // ConstantPool::_pool_holder
	PoolSourceFile    uint64 // ConstantPool::_source_file_name_index (u2)
	PoolSize          uint64 // sizeof(ConstantPool): the entries follow
	PoolLength        uint64 // ConstantPool::_length (int)
	KlassName         uint64 // Klass::_name
	SymbolLength      uint64 // Symbol::_length (u2)
	SymbolBody        uint64 // Symbol::_body

	// Interpreter frames: bytes from rbp.
	InterpMethod   int64
	InterpSenderSP int64
}

// Heap is one CodeHeap of the code cache.
type Heap struct {
	Low, High   uint64 // reserved memory
	Segmap      uint64 // a byte per segment
	Log2Segment uint32
}

// Process is a JVM: its layout and where its code lies.
type Process struct {
	PID    int
	Path   string // libjvm.so
	Layout Layout
	// [CodeStart, CodeEnd): the code cache, reserved at start.
	CodeStart, CodeEnd uint64
	Heaps              []Heap
	// [InterpStart, InterpEnd): the template interpreter's code.
	InterpStart, InterpEnd uint64
}

// layoutOf picks the fields the agent uses; a missing one is ErrUnsupported.
func layoutOf(vm *VMStructs) (Layout, error) {
	var l Layout
	var missing []string
	field := func(names ...string) uint64 {
		for _, n := range names {
			if f, ok := vm.Fields[n]; ok && !f.Static {
				return f.Offset
			}
		}
		missing = append(missing, names[0])
		return 0
	}
	size := func(name string) uint64 {
		if s, ok := vm.Types[name]; ok {
			return s
		}
		missing = append(missing, "sizeof("+name+")")
		return 0
	}
	l.HeapBlock = size("HeapBlock")
	l.BlobName = field("CodeBlob._name")
	l.BlobFrameSize = field("CodeBlob._frame_size")
	l.BlobFrameComplete = field("CodeBlob._frame_complete_offset")
	if _, ok := vm.Fields["CodeBlob._code_offset"]; ok {
		l.BlobCode, l.CodeIsOffset = field("CodeBlob._code_offset"), true
	} else {
		l.BlobCode = field("CodeBlob._code_begin")
	}
	l.FrameCompleteBytes = 4
	l.BlobKind = profiler.HotSpotNoField
	if f, ok := vm.Fields["CodeBlob._kind"]; ok {
		k, ok := vm.Ints["CodeBlobKind::Nmethod"]
		if !ok || k < 0 || k > 255 {
			return l, fmt.Errorf("%w: CodeBlob._kind without CodeBlobKind::Nmethod", ErrUnsupported)
		}
		l.BlobKind, l.NmethodKind = f.Offset, uint64(k)
		// _frame_complete_offset became an int16_t with the kind (JDK-8329433).
		l.FrameCompleteBytes = 2
	}
	l.NmethodMethod = field("nmethod._method", "CompiledMethod._method")
	l.MethodConstMethod = field("Method._constMethod")
	l.ConstMethodPool = field("ConstMethod._constants")
	l.ConstMethodName = field("ConstMethod._name_index")
	l.ConstMethodSig = field("ConstMethod._signature_index")
	l.PoolHolder = field("ConstantPool._pool_holder")
	l.PoolSourceFile = field("ConstantPool._source_file_name_index")
	l.PoolSize = size("ConstantPool")
	l.PoolLength = field("ConstantPool._length")
	l.KlassName = field("Klass._name")
	l.SymbolLength = field("Symbol._length")
	l.SymbolBody = field("Symbol._body", "Symbol._body[0]")
	sender := int64(interpreterSenderSPSlot)
	if v, ok := vm.Ints["frame::interpreter_frame_sender_sp_offset"]; ok {
		sender = v
	}
	method := int64(interpreterMethodSlot)
	if v, ok := vm.Ints["frame::interpreter_frame_method_offset"]; ok {
		method = v
	} else if v, ok := vm.Ints["frame::interpreter_frame_last_sp_offset"]; ok {
		method = v - 1
	}
	l.InterpSenderSP, l.InterpMethod = sender*8, method*8
	if len(missing) > 0 {
		return l, fmt.Errorf("%w: vmStructs lack %v", ErrUnsupported, missing)
	}
	for _, o := range []uint64{l.HeapBlock, l.BlobName, l.BlobFrameSize, l.BlobFrameComplete, l.BlobCode, l.NmethodMethod,
		l.MethodConstMethod, l.ConstMethodPool, l.ConstMethodName, l.ConstMethodSig, l.PoolHolder, l.PoolSourceFile,
		l.PoolSize, l.PoolLength, l.KlassName, l.SymbolLength, l.SymbolBody} {
		if o >= 4096 {
			return l, fmt.Errorf("%w: field offset %d", ErrInvalid, o)
		}
	}
	if l.InterpMethod < -256 || l.InterpMethod >= 0 || l.InterpSenderSP < -256 || l.InterpSenderSP >= 0 {
		return l, fmt.Errorf("%w: interpreter slots %d, %d", ErrInvalid, l.InterpMethod, l.InterpSenderSP)
	}
	return l, nil
}

// static returns the address of a static field, moved by rebase (the
// tables were read from a process that loaded libjvm.so elsewhere).
func static(vm *VMStructs, name string, rebase uint64) (uint64, error) {
	f, ok := vm.Fields[name]
	if !ok || !f.Static || f.Address == 0 {
		return 0, fmt.Errorf("%w: no static %s", ErrUnsupported, name)
	}
	return f.Address + rebase, nil
}

// newProcess reads where the code cache and the interpreter lie. They are
// fixed once the JVM has started (the code cache is reserved whole); a
// JVM still starting has neither yet: ErrNotReady. rebase moves the
// addresses of statics (static).
func newProcess(mem io.ReaderAt, vm *VMStructs, rebase uint64) (*Process, error) {
	l, err := layoutOf(vm)
	if err != nil {
		return nil, err
	}
	r := &memReader{mem: mem}
	p := &Process{Layout: l}
	fieldOf := func(name string) uint64 { return vm.Fields[name].Offset }
	// The code cache's heaps: a GrowableArray<CodeHeap*>.
	heapsAt, err := static(vm, "CodeCache._heaps", rebase)
	if err != nil {
		return nil, err
	}
	arr := r.u64(heapsAt)
	n := r.u32(arr + fieldOf("GrowableArrayBase._len"))
	data := r.u64(arr + fieldOf("GrowableArray<int>._data"))
	if r.err != nil || arr == 0 || n == 0 {
		return nil, fmt.Errorf("%w: code cache not initialized", ErrNotReady)
	}
	if n > profiler.HotSpotMaxHeaps {
		return nil, fmt.Errorf("%w: %d code heaps (at most %d)", ErrUnsupported, n, profiler.HotSpotMaxHeaps)
	}
	mem0, seg := fieldOf("CodeHeap._memory"), fieldOf("CodeHeap._segmap")
	low, high := fieldOf("VirtualSpace._low_boundary"), fieldOf("VirtualSpace._high_boundary")
	for i := range uint64(n) {
		h := r.u64(data + 8*i)
		heap := Heap{
			Low: r.u64(h + mem0 + low), High: r.u64(h + mem0 + high),
			Segmap:      r.u64(h + seg + low),
			Log2Segment: r.u32(h + fieldOf("CodeHeap._log2_segment_size")),
		}
		if r.err != nil {
			return nil, r.err
		}
		if heap.Low >= heap.High || heap.High >= 1<<47 || heap.Segmap == 0 || heap.Log2Segment < 4 || heap.Log2Segment > 20 {
			return nil, fmt.Errorf("%w: code heap %d %+v", ErrInvalid, i, heap)
		}
		p.Heaps = append(p.Heaps, heap)
	}
	lowAt, err := static(vm, "CodeCache._low_bound", rebase)
	if err != nil {
		return nil, err
	}
	highAt, err := static(vm, "CodeCache._high_bound", rebase)
	if err != nil {
		return nil, err
	}
	p.CodeStart, p.CodeEnd = r.u64(lowAt), r.u64(highAt)
	// The interpreter: a StubQueue's buffer.
	codeAt, err := static(vm, "AbstractInterpreter._code", rebase)
	if err != nil {
		return nil, err
	}
	queue := r.u64(codeAt)
	if r.err != nil || queue == 0 {
		return nil, fmt.Errorf("%w: interpreter not generated", ErrNotReady)
	}
	p.InterpStart = r.u64(queue + fieldOf("StubQueue._stub_buffer"))
	p.InterpEnd = p.InterpStart + uint64(r.u32(queue+fieldOf("StubQueue._buffer_limit")))
	if r.err != nil {
		return nil, r.err
	}
	if p.CodeStart >= p.CodeEnd || p.CodeEnd >= 1<<47 || p.InterpStart < p.CodeStart || p.InterpEnd > p.CodeEnd {
		return nil, fmt.Errorf("%w: code cache [%#x, %#x), interpreter [%#x, %#x)", ErrInvalid, p.CodeStart, p.CodeEnd, p.InterpStart, p.InterpEnd)
	}
	return p, nil
}

// BPF is the process's entry of hotspot_procs.
func (p *Process) BPF() profiler.ProfileHotspotProc {
	l := p.Layout
	out := profiler.ProfileHotspotProc{
		CodeStart: p.CodeStart, CodeEnd: p.CodeEnd, InterpStart: p.InterpStart, InterpEnd: p.InterpEnd,
		HeapBlock: uint16(l.HeapBlock), BlobName: uint16(l.BlobName), BlobFrameSize: uint16(l.BlobFrameSize),
		BlobFrameComplete: uint16(l.BlobFrameComplete), BlobCode: uint16(l.BlobCode), BlobKind: uint16(l.BlobKind),
		NmethodMethod: uint16(l.NmethodMethod), InterpMethod: int16(l.InterpMethod), InterpSenderSp: int16(l.InterpSenderSP),
		FrameCompleteSize: uint8(l.FrameCompleteBytes), NmethodKind: uint8(l.NmethodKind),
	}
	if l.CodeIsOffset {
		out.CodeIsOffset = 1
	}
	for i, h := range p.Heaps {
		out.Heaps[i] = profiler.ProfileHotspotHeap{Low: h.Low, High: h.High, Segmap: h.Segmap, Log2Segment: h.Log2Segment}
	}
	return out
}

// IsFrame reports whether v, a user frame of an unwound stack, is a Java
// frame (hotspot.h): flag bit 61 and not Python's or JavaScript's.
func IsFrame(v uint64) bool {
	return v&profiler.JavaFrameFlag != 0 && v&(profiler.PythonFrameFlag|profiler.JSFrameFlag) == 0
}

// DecodeFrame returns the Method* of a Java frame.
func DecodeFrame(v uint64) uint64 { return v & profiler.JavaPointerMask }

// Interpreted reports whether the Java frame v ran in the interpreter (not
// compiled code).
func Interpreted(v uint64) bool { return v&profiler.JavaInterpreted != 0 }

// memReader reads little-endian words, keeping the first error.
type memReader struct {
	mem io.ReaderAt
	err error
}

func (r *memReader) bytes(addr uint64, n int) []byte {
	if r.err != nil {
		return nil
	}
	if addr < 4096 || addr >= 1<<47 {
		r.err = fmt.Errorf("%w: address %#x", ErrInvalid, addr)
		return nil
	}
	b := make([]byte, n)
	if _, err := r.mem.ReadAt(b, int64(addr)); err != nil {
		r.err = fmt.Errorf("%w: read %d bytes at %#x: %v", ErrInvalid, n, addr, err)
		return nil
	}
	return b
}

func (r *memReader) u64(addr uint64) uint64 {
	if b := r.bytes(addr, 8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *memReader) u32(addr uint64) uint32 {
	if b := r.bytes(addr, 4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *memReader) u16(addr uint64) uint16 {
	if b := r.bytes(addr, 2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

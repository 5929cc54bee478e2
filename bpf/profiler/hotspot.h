// SPDX-License-Identifier: GPL-2.0
//
// Java frames of HotSpot JVMs (services/agent/internal/hotspot). Compiled
// Java code keeps no frame pointer and has no call-frame information, but
// the JVM describes its code cache: every piece of code is a CodeBlob in
// one of a few CodeHeaps, found from any address by walking back the
// heap's segment map (one byte per segment: 0 at a block's start, else how
// many segments to step back; 0xff free). A blob gives its frame size in
// words, return address included, so a compiled frame unwinds from rsp
// alone. The template interpreter (one range of code) keeps rbp as a frame
// pointer and the frame's Method* at a fixed slot below it. A Java frame,
// compiled or interpreted, is one u64 in the unwound stack in place of its
// pc: JAVA_FRAME_FLAG | JAVA_INTERPRETED for the interpreter's | the
// Method* (47 bits). Included by unwind.h after frame_pointer_step.

#define JAVA_FRAME_FLAG (1ULL << 61)
#define JAVA_INTERPRETED (1ULL << 60)
#define JAVA_POINTER_MASK ((1ULL << 47) - 1)
// Code heaps of a code cache: 3 when segmented (the default with tiered
// compilation), else 1.
#define HS_MAX_HEAPS 4
// Steps back through a segment map: a step covers at most 254 segments
// (32 KiB of 128-byte segments), so a blob up to 1 MiB is found.
#define HS_SEGMAP_STEPS 32
#define HS_SEGMAP_FREE 0xff
#define HS_NO_FIELD 0xffff

struct hotspot_heap {
	__u64 low, high; // the heap's reserved memory
	__u64 segmap;    // its segment map: a byte per segment
	__u32 log2_segment;
	__u32 pad;
};

// Where HotSpot keeps what the walker reads, per process (hotspot.Process
// in Go), from the tables libjvm.so exports (gHotSpotVMStructs...).
struct hotspot_proc {
	__u64 code_start, code_end;     // CodeCache::_low_bound, _high_bound
	__u64 interp_start, interp_end; // the template interpreter's code
	struct hotspot_heap heaps[HS_MAX_HEAPS];
	__u16 heap_block;      // sizeof(HeapBlock): the header before a blob
	__u16 blob_name;       // CodeBlob::_name (const char *)
	__u16 blob_frame_size; // CodeBlob::_frame_size (int, words)
	__u16 blob_frame_complete; // CodeBlob::_frame_complete_offset
	__u16 blob_code;       // CodeBlob::_code_begin (address) or _code_offset (int)
	__u16 blob_kind;       // CodeBlob::_kind (u8); HS_NO_FIELD: the name tells
	__u16 nmethod_method;  // nmethod::_method (CompiledMethod:: before 21)
	__s16 interp_method;   // bytes from rbp to an interpreter frame's Method*
	__s16 interp_sender_sp; // ... and to its sender's sp
	__u8 frame_complete_size; // bytes of _frame_complete_offset: 2 or 4
	__u8 code_is_offset;   // blob_code is an int offset from the blob
	__u8 nmethod_kind;     // CodeBlobKind::Nmethod
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024); // resized before loading
	__type(key, __u32);
	__type(value, struct hotspot_proc);
} hotspot_procs SEC(".maps");

static __always_inline int java_pointer(__u64 v)
{
	return v > 4096 && v < (1ULL << 47) && (v & 7) == 0;
}

// hotspot_blob returns the address of the CodeBlob holding pc, or 0.
static __always_inline __u64 hotspot_blob(struct hotspot_proc *hs, __u64 pc)
{
	for (int i = 0; i < HS_MAX_HEAPS; i++) {
		struct hotspot_heap *h = &hs->heaps[i];
		__u32 shift = h->log2_segment & 31;
		__u64 idx;

		if (pc < h->low || pc >= h->high)
			continue;
		idx = (pc - h->low) >> shift;
		for (int j = 0; j < HS_SEGMAP_STEPS; j++) {
			__u8 back = HS_SEGMAP_FREE;
			if (bpf_probe_read_user(&back, 1, (void *)(h->segmap + idx)) || back == HS_SEGMAP_FREE)
				return 0;
			if (back == 0)
				return h->low + (idx << shift) + hs->heap_block;
			if (idx < back)
				return 0;
			idx -= back;
		}
		return 0;
	}
	return 0;
}

// hotspot_is_nmethod tells compiled Java methods (and the wrappers of
// native ones) from the VM's stubs: by the blob's kind (HotSpot 23+), else
// by its name, "nmethod" or "native nmethod".
static __always_inline int hotspot_is_nmethod(struct hotspot_proc *hs, __u64 blob)
{
	__u64 name = 0, chars[2] = {};

	if (hs->blob_kind != HS_NO_FIELD) {
		__u8 kind = 0;
		if (bpf_probe_read_user(&kind, 1, (void *)(blob + hs->blob_kind)))
			return 0;
		return kind == hs->nmethod_kind;
	}
	if (bpf_probe_read_user(&name, sizeof(name), (void *)(blob + hs->blob_name)) || !name)
		return 0;
	if (bpf_probe_read_user(chars, sizeof(chars), (void *)name))
		return 0;
	return chars[0] == 0x00646f6874656d6eULL || // "nmethod\0"
	       (chars[0] == 0x6e2065766974616eULL && // "native n"
		(chars[1] & 0x00ffffffffffffffULL) == 0x00646f6874656dULL); // "method\0"
}

// Where a compiled frame's return address is when the sampled pc is at its
// edges, as the bytes at pc tell.
#define HS_FRAME_BUILT 0 // rsp + frame size
#define HS_FRAME_NONE 1  // return address at rsp
#define HS_FRAME_RBP 2   // rbp at rsp, return address above it
#define HS_FRAME_NO_RBP 3 // rsp + frame size, rbp not saved yet

// hotspot_leaf_frame says how much of the frame of the interrupted (leaf)
// blob is built. In the prologue, before the frame is complete: with a
// stack bang, rbp is pushed ("push rbp" just ran) then the frame
// allocated; without (a leaf method with a small frame), the frame is
// allocated first ("sub rsp, imm32" just ran) and rbp stored in it next;
// else nothing is built yet. In the epilogue, rbp may be still on the
// stack ("pop rbp" next) or the frame gone (the return poll "cmp rsp,
// [r15+d]; ja", then "ret").
static __always_inline int hotspot_leaf_frame(struct hotspot_proc *hs, __u64 blob, __u64 pc)
{
	__u8 b[16] = {};
	__s32 complete = 0;
	__u64 code = 0;

	if (bpf_probe_read_user(b, sizeof(b), (void *)(pc - 8)))
		return HS_FRAME_BUILT;
	if (b[8] == 0xc3)
		return HS_FRAME_NONE;
	if (b[8] == 0x5d)
		return HS_FRAME_RBP;
	if (b[8] == 0x49 && b[9] == 0x3b && (b[10] == 0xa7 || b[10] == 0x67))
		return HS_FRAME_NONE;
	if (b[8] == 0x0f && b[9] == 0x87 &&
	    ((b[1] == 0x49 && b[2] == 0x3b && b[3] == 0xa7) || (b[4] == 0x49 && b[5] == 0x3b && b[6] == 0x67)))
		return HS_FRAME_NONE;
	if (bpf_probe_read_user(&complete, 4, (void *)(blob + hs->blob_frame_complete)))
		return HS_FRAME_BUILT;
	if (hs->frame_complete_size == 2)
		complete = (__s16)complete;
	if (hs->code_is_offset) {
		__s32 off = 0;
		if (bpf_probe_read_user(&off, 4, (void *)(blob + hs->blob_code)))
			return HS_FRAME_BUILT;
		code = blob + off;
	} else if (bpf_probe_read_user(&code, 8, (void *)(blob + hs->blob_code))) {
		return HS_FRAME_BUILT;
	}
	if (complete <= 0 || pc >= code + complete)
		return HS_FRAME_BUILT;
	if (b[7] == 0x55)
		return HS_FRAME_RBP;
	if (b[1] == 0x48 && b[2] == 0x81 && b[3] == 0xec)
		return HS_FRAME_NO_RBP;
	return HS_FRAME_NONE;
}

// hotspot_push records v in place of the frame at pc.
static __always_inline int hotspot_push(struct unwind_state *s, __u64 v)
{
	struct unwound_stack *out;
	__u32 zero = 0, len = s->len;

	out = bpf_map_lookup_elem(&unwind_scratch, &zero);
	if (!out || len >= UNWIND_MAX_FRAMES)
		return -1;
	out->frames[len] = v;
	s->len = len + 1;
	s->hash = (s->hash ^ v) * 0x100000001b3ULL;
	return 0;
}

// hotspot_step records and unwinds the frame of a JVM's code cache at pc
// (hotspot.h): an interpreted frame through rbp, a compiled one or a stub
// with its blob's frame size, other stubs through rbp (or, as the leaf,
// from rsp). 0: go on, 1: stop. A global function, like python_step.
__noinline int hotspot_step(struct unwind_state *s, __u64 pc)
{
	struct hotspot_proc *hs;
	__u64 v, blob, cfa, frame[2], sp, method = 0;
	__s32 size = 0;
	int leaf, how = HS_FRAME_BUILT;

	if (!s)
		return 1;
	hs = bpf_map_lookup_elem(&hotspot_procs, &s->pid);
	if (!hs)
		return 1;
	leaf = !s->walked;
	v = s->pc;
	s->walked = 1;
	s->exact_pc = 0;
	if (pc >= hs->interp_start && pc < hs->interp_end) {
		if (!s->bp_valid)
			return 1;
		if (!bpf_probe_read_user(&method, sizeof(method), (void *)(s->bp + hs->interp_method)) && java_pointer(method)) {
			v = JAVA_FRAME_FLAG | JAVA_INTERPRETED | method;
			count(COUNTER_JAVA_FRAMES);
		}
		if (hotspot_push(s, v))
			return 1;
		sp = 0;
		if (bpf_probe_read_user(frame, sizeof(frame), (void *)s->bp) ||
		    bpf_probe_read_user(&sp, sizeof(sp), (void *)(s->bp + hs->interp_sender_sp))) {
			count(COUNTER_UNWIND_READ_ERRORS);
			return 1;
		}
		// The sender's sp before the interpreter extended the frame: what a
		// compiled caller's frame size counts from.
		s->sp = java_pointer(sp) ? sp : s->bp + 16;
		s->bp = frame[0];
		s->pc = frame[1];
		return s->pc == 0;
	}
	blob = hotspot_blob(hs, pc);
	if (!blob) {
		count(COUNTER_JAVA_NO_BLOB);
		if (hotspot_push(s, v))
			return 1;
		return frame_pointer_step(s) || s->done;
	}
	if (bpf_probe_read_user(&size, sizeof(size), (void *)(blob + hs->blob_frame_size)))
		size = 0;
	if (hotspot_is_nmethod(hs, blob)) {
		if (!bpf_probe_read_user(&method, sizeof(method), (void *)(blob + hs->nmethod_method)) && java_pointer(method)) {
			v = JAVA_FRAME_FLAG | method;
			count(COUNTER_JAVA_FRAMES);
		}
	} else if (size <= 0) {
		// A stub without a frame size: the call stub and most stub
		// routines build an rbp frame; a leaf may not have yet.
		if (hotspot_push(s, v))
			return 1;
		if (!leaf)
			return frame_pointer_step(s) || s->done;
		how = HS_FRAME_NONE;
	}
	if (how == HS_FRAME_BUILT && hotspot_push(s, v))
		return 1;
	if (leaf && how == HS_FRAME_BUILT)
		how = hotspot_leaf_frame(hs, blob, pc);
	sp = s->sp;
	switch (how) {
	case HS_FRAME_NONE:
		cfa = sp + 8;
		break;
	case HS_FRAME_RBP:
		cfa = sp + 16;
		break;
	default:
		if (size <= 0 || size > 1 << 16)
			return 1;
		cfa = sp + (__u64)size * 8;
	}
	if (bpf_probe_read_user(frame, sizeof(frame), (void *)(cfa - 16))) {
		count(COUNTER_UNWIND_READ_ERRORS);
		return 1;
	}
	if (how == HS_FRAME_BUILT || how == HS_FRAME_RBP) {
		s->bp = frame[0];
		s->bp_valid = 1;
	}
	s->sp = cfa;
	s->pc = frame[1];
	if (s->pc == 0)
		count(COUNTER_UNWIND_COMPLETE);
	return s->pc == 0;
}

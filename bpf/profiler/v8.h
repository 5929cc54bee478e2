// SPDX-License-Identifier: GPL-2.0
//
// JavaScript frames of V8 (node) (services/agent/internal/v8). V8's
// generated code (JIT code in anonymous memory, and the builtins embedded
// in node's .text, the bytecode interpreter among them) keeps an rbp chain
// and has no call-frame information, so the walker steps through it with
// frame pointers. At each such frame of a process the agent found to run
// V8, the slot below the saved rbp tells a JavaScript frame from a typed
// one: a JavaScript frame holds its context there (a tagged heap pointer,
// low bit set), a typed frame (entry, exit, stub, builtin) a frame-type
// marker (an even integer). A JavaScript frame holds its JSFunction two
// slots down; the function's SharedFunctionInfo is recorded, not the
// function: functions of closures are young objects that the next
// scavenge moves, their SharedFunctionInfo is old and stays. A JavaScript
// frame is one u64 in the unwound stack, in place of its pc:
// JS_FRAME_FLAG | the SharedFunctionInfo's tagged pointer (47 bits).

#define JS_FRAME_FLAG (1ULL << 62)
#define JS_POINTER_MASK ((1ULL << 47) - 1)
// A tagged pointer to a heap object: low two bits 01 (weak ones are 11).
#define JS_HEAP_OBJECT_TAG 1
#define JS_HEAP_OBJECT_TAG_MASK 3

// Where V8 keeps what the walker reads, per process (v8.Offsets in Go),
// from the postmortem metadata node exports (v8dbg_*).
struct v8_proc {
	__u64 code_start; // [code_start, code_end): the embedded builtins; 0: unknown
	__u64 code_end;
	__s16 fp_context;  // v8dbg_off_fp_context_or_frame_type: context or marker
	__s16 fp_function; // v8dbg_off_fp_function: the JSFunction
	__u16 function_shared; // v8dbg_class_JSFunction__shared__SharedFunctionInfo
	__u16 pad[1];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024); // resized before loading
	__type(key, __u32);
	__type(value, struct v8_proc);
} v8_procs SEC(".maps");

static __always_inline int js_tagged(__u64 v)
{
	return (v & JS_HEAP_OBJECT_TAG_MASK) == JS_HEAP_OBJECT_TAG && v > 4096 && v < (1ULL << 47);
}

// js_frame returns the value to record for the frame whose frame pointer is
// fp, or 0 when it is no JavaScript frame.
static __always_inline __u64 js_frame(struct v8_proc *v8, __u64 fp)
{
	__u64 ctx = 0, fn = 0, sfi = 0;

	if (fp < 4096 || fp >= (1ULL << 47))
		return 0;
	if (bpf_probe_read_user(&ctx, sizeof(ctx), (void *)(fp + v8->fp_context)) || !js_tagged(ctx))
		return 0;
	if (bpf_probe_read_user(&fn, sizeof(fn), (void *)(fp + v8->fp_function)) || !js_tagged(fn))
		return 0;
	if (bpf_probe_read_user(&sfi, sizeof(sfi), (void *)(fn - JS_HEAP_OBJECT_TAG + v8->function_shared)) || !js_tagged(sfi))
		return 0;
	return JS_FRAME_FLAG | (sfi & JS_POINTER_MASK);
}

// SPDX-License-Identifier: GPL-2.0
//
// CPython frames (services/agent/internal/python). For a process the agent
// found to run CPython, the sampled thread's PyThreadState is found from
// _PyRuntime (the GIL holder first, then the main interpreter's thread list,
// matched on pthread_self, which is the thread's fs base on x86-64), and its
// current _PyInterpreterFrame. While the native unwinder walks the stack,
// each frame of the eval loop (_PyEval_EvalFrameDefault) is replaced by the
// Python frames that C frame runs: from the current frame along `previous`
// to the entry frame of that C frame (is_entry in 3.11; in 3.12+ the frame
// before the shim the eval loop puts on the C stack, owner
// FRAME_OWNED_BY_CSTACK). A Python frame is one u64 in the unwound stack:
// PY_FRAME_FLAG | instruction index << 45 | code object address >> 3.

// Kept in sync with python.NoOffset in Go.
#define PY_NO_OFFSET 65535 // 0xffff
// Threads of the main interpreter searched for the sampled one.
#define PY_MAX_THREADS 32

#define PY_FRAME_FLAG (1ULL << 63)
#define PY_INSTR_SHIFT 45
#define PY_INSTR_MAX ((1ULL << 18) - 1)
#define PY_CODE_MASK ((1ULL << 45) - 1)

// Where CPython's state is, per process (python.Layout in Go).
struct python_proc {
	__u64 runtime;    // address of _PyRuntime
	__u64 eval_start; // [eval_start, eval_end): _PyEval_EvalFrameDefault
	__u64 eval_end;
	__u16 runtime_tstate_current; // _PyRuntime.gilstate.tstate_current; PY_NO_OFFSET: none (3.12+)
	__u16 runtime_interp_head;    // _PyRuntime.interpreters.head
	__u16 interp_threads_head;    // PyInterpreterState.threads.head
	__u16 tstate_next;            // PyThreadState.next
	__u16 tstate_thread_id;       // PyThreadState.thread_id (pthread_self)
	__u16 tstate_frame;           // PyThreadState.cframe (3.11, 3.12) or current_frame (3.13+)
	__u16 cframe_current_frame;   // _PyCFrame.current_frame; PY_NO_OFFSET: tstate_frame is the frame
	__u16 frame_code;             // _PyInterpreterFrame.f_code / f_executable
	__u16 frame_previous;         // _PyInterpreterFrame.previous
	__u16 frame_instr;            // _PyInterpreterFrame.prev_instr / instr_ptr
	__u16 frame_is_entry;         // _PyInterpreterFrame.is_entry; PY_NO_OFFSET: shim frames (3.12+)
	__u16 frame_owner;            // _PyInterpreterFrame.owner
	__u16 code_units;             // offset of the code units in the code object (co_code_adaptive)
	__u8 owner_cstack;            // owner of a shim frame (FRAME_OWNED_BY_CSTACK)
	__u8 pad[5];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024); // resized before loading
	__type(key, __u32);
	__type(value, struct python_proc);
} python_procs SEC(".maps");

// Only the fields read, relocated against the kernel's BTF (CO-RE).
struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

#define PF_KTHREAD 0x00200000
struct task_struct {
	unsigned int flags;
	int tgid;
	struct thread_struct thread;
} __attribute__((preserve_access_index));

static __always_inline __u64 py_read_ptr(__u64 addr)
{
	__u64 v = 0;

	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
		return 0;
	return v;
}

// python_current_frame returns the current _PyInterpreterFrame of the
// sampled thread, or 0 (not running Python, or not found).
static __always_inline __u64 python_current_frame(struct python_proc *py)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 self = 0, ts = 0, tid, frame;

	if (bpf_probe_read_kernel(&self, sizeof(self), &task->thread.fsbase) || self == 0)
		return 0;
	if (py->runtime_tstate_current != PY_NO_OFFSET) {
		// The GIL holder: the thread running Python code most of the time.
		ts = py_read_ptr(py->runtime + py->runtime_tstate_current);
		if (ts && py_read_ptr(ts + py->tstate_thread_id) != self)
			ts = 0;
	}
	if (!ts) {
		__u64 interp = py_read_ptr(py->runtime + py->runtime_interp_head);
		__u64 t = interp ? py_read_ptr(interp + py->interp_threads_head) : 0;
		for (int i = 0; i < PY_MAX_THREADS && t; i++) {
			tid = py_read_ptr(t + py->tstate_thread_id);
			if (tid == self) {
				ts = t;
				break;
			}
			t = py_read_ptr(t + py->tstate_next);
		}
	}
	if (!ts) {
		count(COUNTER_PYTHON_NO_THREAD);
		return 0;
	}
	frame = py_read_ptr(ts + py->tstate_frame);
	if (frame && py->cframe_current_frame != PY_NO_OFFSET)
		frame = py_read_ptr(frame + py->cframe_current_frame);
	return frame;
}

// python_frame_step handles one frame of the Python chain: it returns the
// value to record (0: none) and advances *frame; *more is cleared when the
// eval-loop C frame being replaced has no more Python frames.
static __always_inline __u64 python_frame_step(struct python_proc *py, __u64 *frame, __u8 *more)
{
	__u64 f = *frame, code, instr, units = 0;
	__u8 is_entry = 0, owner = 0;

	*frame = py_read_ptr(f + py->frame_previous);
	if (*frame == 0)
		*more = 0;
	if (bpf_probe_read_user(&owner, sizeof(owner), (void *)(f + py->frame_owner))) {
		count(COUNTER_UNWIND_READ_ERRORS);
		*more = 0;
		*frame = 0;
		return 0;
	}
	if (py->frame_is_entry == PY_NO_OFFSET) {
		if (owner == py->owner_cstack) {
			// The eval loop's shim: the frames before it are the outer
			// C frame's.
			*more = 0;
			return 0;
		}
	} else {
		bpf_probe_read_user(&is_entry, sizeof(is_entry), (void *)(f + py->frame_is_entry));
		if (is_entry)
			*more = 0;
	}
	code = py_read_ptr(f + py->frame_code);
	instr = py_read_ptr(f + py->frame_instr);
	if (code == 0 || code & 7 || code >= (1ULL << 48)) {
		count(COUNTER_UNWIND_READ_ERRORS);
		return 0;
	}
	// A frame not started yet points one unit before its first.
	if (instr >= code + py->code_units)
		units = (instr - code - py->code_units) / 2;
	if (units > PY_INSTR_MAX)
		units = PY_INSTR_MAX;
	count(COUNTER_PYTHON_FRAMES);
	return PY_FRAME_FLAG | units << PY_INSTR_SHIFT | ((code >> 3) & PY_CODE_MASK);
}

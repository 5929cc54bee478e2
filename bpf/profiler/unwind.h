// SPDX-License-Identifier: GPL-2.0
//
// User-stack unwinder driven by the unwind rows the agent compiles from
// .eh_frame/.debug_frame (services/agent/internal/unwind). For a process the
// agent has registered, each frame's instruction address is looked up in the
// process's mappings (an LPM trie keyed by pid and address), then in the
// mapping's table of rows (a binary search in one large array), and the rule
// found gives the caller's stack pointer, frame pointer and return address.
// A mapping without a table is stepped over with frame pointers.

#include <bpf/bpf_endian.h>

#include "python.h"
#include "v8.h"

// Kept in sync with unwind.Rule in Go.
#define RULE_NONE 0
#define RULE_RSP 1
#define RULE_RBP 2
#define RULE_PLT 3
#define RULE_END 4
#define RULE_SIGNAL 5
#define RULE_UNSUPPORTED 6
#define RULE_DEREF 7 // x86-64: CFA = *(rsp + 8*(s8)offset) + 8*(offset >> 8)

#define RBP_LOST (-128)

// arm64 rows (unwind/arm64.go): the rule's low bits, then where the return
// address is; the slot is 8*rbp bytes from the CFA, or from the CFA's
// register with SLOT_FROM_REG.
#define RULE_MASK 7
#define RA_MASK 24
#define RA_IN_LR 0          // in x30 (first frame, or interrupted by a signal); rbp as on x86-64
#define RA_FRAME 8          // x29 at the slot, x30 at the slot + 8
#define RA_SAVED 16         // x30 at the slot, x29 unchanged
#define RA_SAVED_FP_LOST 24 // x30 at the slot, x29 lost
#define SLOT_FROM_REG 32
// A return address without its pointer authentication code (pac-ret): the
// 48 bits of a user address.
#define USER_VA_MASK ((1ULL << 48) - 1)

// Where __kernel_rt_sigreturn (arm64 vDSO) finds the registers the kernel
// saved: sp points at struct rt_sigframe, a 128-byte siginfo then struct
// ucontext, whose uc_mcontext (struct sigcontext) is 176 bytes in and holds
// fault_address, regs[31], sp, pc (uapi asm/ucontext.h, asm/sigcontext.h).
#define SIGFRAME_A64_REGS (128 + 176 + 8)
#define SIGFRAME_A64_FP 544 // regs[29]
#define SIGFRAME_A64_LR 552 // regs[30]
#define SIGFRAME_A64_SP 560
#define SIGFRAME_A64_PC 568

// x86-64: a RULE_UNSUPPORTED row may name the general register its CFA is
// based on (CFA = reg + 8*offset): its DWARF number + 1 in the rule's bits
// from CFA_REG_SHIFT (unwind.Row.CFARegister). The walk knows that register
// in the first frame (REGS_TASK: the task's saved user registers) and in the
// frame a signal interrupted (REGS_SIGNAL: the kernel's struct sigcontext);
// elsewhere the row is unsupported.
#define CFA_REG_SHIFT 3
#define REGS_TASK 1
#define REGS_SIGNAL 2
// The 8-byte slot of DWARF register n (rax, rdx, rcx, rbx, rsi, rdi, -, -,
// r8..r15) is nibble n of these: in struct pt_regs (r15, r14, r13, r12, rbp,
// rbx, r11, r10, r9, r8, rax, rcx, rdx, rsi, rdi, orig_rax, rip, cs, eflags,
// rsp) and in struct sigcontext (r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx,
// rsp, rip): asm/ptrace.h, asm/sigcontext.h.
#define PT_REGS_SLOTS 0x0123678900ed5bcaULL
#define SIGCONTEXT_SLOTS 0x765432100089becdULL
#define PT_REGS_RIP (16 * 8)

// Where __restore_rt finds the registers the kernel saved when it delivered
// a signal: rsp points at struct ucontext (rt_sigframe's return address was
// popped by the handler's ret), uc_mcontext starts 40 bytes in, and
// struct sigcontext holds r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp,
// rip (asm/sigcontext.h).
#define SIGFRAME_REGS 40
#define SIGFRAME_RBP (40 + 10 * 8)
#define SIGFRAME_RSP (40 + 15 * 8)
#define SIGFRAME_RIP (40 + 16 * 8)

// Frames per unwound stack; sampler.MaxUnwindDepth in Go.
#define UNWIND_MAX_FRAMES 128
// Iterations of the walk: a Python frame or a native one each, or nothing.
#define UNWIND_LOOP_STEPS 256
// Binary-search steps: a table has at most 2^24 rows (unwind.Limits).
#define UNWIND_SEARCH_STEPS 24

// One row of a compiled table (unwind.Row in Go): 8 bytes.
struct unwind_row {
	__u32 pc;     // first ELF virtual address the row covers
	__u8 rule;    // RULE_*
	__s8 rbp;     // rbp saved at CFA + 8*rbp; 0: unchanged; RBP_LOST
	__u16 offset; // RULE_RSP/RULE_RBP (and CFA_REG_SHIFT): CFA offset / 8; RULE_PLT: the threshold; RULE_DEREF: N/8, K/8
};

// LPM trie key: pid and address in network byte order, prefixlen counting
// bits after the prefixlen field (32 of pid + up to 64 of address).
struct unwind_mapping_key {
	__u32 prefixlen;
	__u32 pid;
	__u64 addr;
};

struct unwind_mapping {
	__u64 bias;      // ELF virtual address = address - bias
	__u32 first_row; // index in unwind_rows
	__u32 rows;      // 0: no table, frame pointers
};

struct unwound_stack {
	__u64 len;
	__u64 frames[UNWIND_MAX_FRAMES];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); // resized to the row budget before loading
	__type(key, __u32);
	__type(value, struct unwind_row);
} unwind_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 65536); // resized before loading
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct unwind_mapping_key);
	__type(value, struct unwind_mapping);
} unwind_mappings SEC(".maps");

// Processes whose mappings the agent has registered; others keep the
// kernel's frame-pointer walk.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192); // resized before loading
	__type(key, __u32);
	__type(value, __u32);
} unwind_processes SEC(".maps");

// Processes whose registration is stale or missing: an address of a
// registered process fell in no registered mapping (a library loaded since),
// a registered process forked, a process neither registered nor ignored was
// sampled, or any process exec'd a new program (its identity changed). The
// agent reads their identity and maps again and deletes the entry. Values
// say why (REFRESH_*).
#define REFRESH_MISS 1
#define REFRESH_EXEC 2
#define REFRESH_FORK 3
#define REFRESH_SAMPLED 4
#define REFRESH_EXEC_SAMPLED 5 // exec'd, then sampled before the agent read the mark
#define REFRESH_CGROUP 6       // moved to another cgroup: its identity changed

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192); // resized before loading
	__type(key, __u32);
	__type(value, __u32);
} unwind_refresh SEC(".maps");

// Processes the agent read and does not unwind with tables (not targeted, a
// kernel thread): their samples mark nothing, so an idle host costs the
// agent no registration work. IGNORE_UNTIL_EXEC: their exec, a fork reusing
// the pid or a cgroup move takes them out. IGNORE_STICKY, when the agent
// targets by cgroup alone (--systemd-units, --cgroups): kept across exec and
// inherited by forks, so a build outside the targets costs nothing; a cgroup
// move takes them out. A full map only means more marks.
#define IGNORE_UNTIL_EXEC 1
#define IGNORE_STICKY 2

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, __u32);
} unwind_ignored SEC(".maps");

// Wakes the agent when a process is marked: it registers marked processes a
// few milliseconds later instead of polling the marks. A record is a pid; the
// agent reads the marks, not the records. The default (adaptive) wake-up
// notifies only a reader that has caught up: one wake-up per burst.
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} unwind_wakeup SEC(".maps");

static __always_inline void refresh(__u32 pid, __u32 why)
{
	// BPF_NOEXIST: the first reason stays, and a full map costs nothing.
	if (bpf_map_update_elem(&unwind_refresh, &pid, &why, BPF_NOEXIST) == 0)
		bpf_ringbuf_output(&unwind_wakeup, &pid, sizeof(pid), 0);
}

#define UNWOUND_MAP(name)                                  \
	struct {                                           \
		__uint(type, BPF_MAP_TYPE_HASH);           \
		__uint(max_entries, 10240);                \
		__uint(map_flags, BPF_F_NO_PREALLOC);      \
		__type(key, __u64);                        \
		__type(value, struct unwound_stack);       \
	} name SEC(".maps")

UNWOUND_MAP(unwound_stacks_0);
UNWOUND_MAP(unwound_stacks_1);

// The stack being built: too large for the 512-byte BPF stack.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwound_stack);
} unwind_scratch SEC(".maps");

struct unwind_state {
	__u64 pc, sp, bp;
	__u32 pid;
	__u32 len;
	__u64 hash;
	__u8 bp_valid;
	__u8 done;
	// The next pc was interrupted, not called from: look it up as is.
	__u8 exact_pc;
	// CPython (python.h): py_more while the Python frames of the eval-loop
	// C frame at pc are recorded in its place; py_skip then unwinds that C
	// frame without recording it.
	__u8 py_more;
	__u8 py_skip;
	__u8 walked; // a native frame was stepped: pc is a return address
	__u64 py_frame; // innermost Python frame not recorded yet; 0: none
	__u64 eval_start, eval_end;
	// V8 (v8.h): v8 for a process in v8_procs; v8_step sets js_frame to
	// the JavaScript frame to record in place of pc (0: none), and js_fp
	// when pc is in V8's embedded builtins, which step with frame pointers
	// whatever the tables say.
	__u8 v8;
	__u8 js_fp;
	__u64 js_frame;
	struct v8_proc v8_proc; // copied once per sample: no lookup per frame
	// HotSpot (hotspot.h): an address in [jvm_start, jvm_end), the code
	// cache, is stepped by hotspot_step.
	__u64 jvm_start, jvm_end;
	// x86-64: where the general registers of the frame at pc are (REGS_*;
	// 0: unknown), and the struct sigcontext for REGS_SIGNAL.
	__u8 regs_in;
	__u64 regs_at;
#if defined(__TARGET_ARCH_arm64)
	// x30: known in the first frame and in the frame a signal interrupted
	// (lr_valid), where a row may say the return address is still in it.
	__u64 lr;
	__u8 lr_valid;
	// sp: unknown after a frame-pointer step (a GCC frame record is at the
	// bottom of its frame, not under the caller's sp as on x86-64).
	__u8 sp_valid;
#endif
};

// find_row returns the row covering pc in the table of m, or NULL.
static __always_inline struct unwind_row *find_row(struct unwind_mapping *m, __u64 pc)
{
	__u32 lo = m->first_row, hi = m->first_row + m->rows;
	struct unwind_row *row;

	if (pc >= (1ULL << 32))
		return NULL;
	row = bpf_map_lookup_elem(&unwind_rows, &lo);
	if (!row || row->pc > pc)
		return NULL;
	// Invariant: row[lo].pc <= pc, and pc < row[hi].pc or hi is the end.
	for (int i = 0; i < UNWIND_SEARCH_STEPS; i++) {
		__u32 mid;
		if (hi - lo <= 1)
			break;
		mid = lo + (hi - lo) / 2;
		row = bpf_map_lookup_elem(&unwind_rows, &mid);
		if (!row)
			return NULL;
		if (row->pc <= pc)
			lo = mid;
		else
			hi = mid;
	}
	if (hi - lo > 1) {
		count(COUNTER_UNWIND_UNSUPPORTED);
		return NULL;
	}
	return bpf_map_lookup_elem(&unwind_rows, &lo);
}

// frame_pointer_step unwinds one frame through rbp: the fallback for code the
// agent has no table for.
static __always_inline int frame_pointer_step(struct unwind_state *s)
{
	__u64 frame[2];

	if (!s->bp_valid) {
		s->done = 1;
		return 0;
	}
	if (s->bp == 0) {
		// The outermost frame clears rbp (_start, Go's goexit).
		count(COUNTER_UNWIND_COMPLETE);
		s->done = 1;
		return 0;
	}
	if (bpf_probe_read_user(frame, sizeof(frame), (void *)s->bp)) {
		count(COUNTER_UNWIND_READ_ERRORS);
		return -1;
	}
	count(COUNTER_UNWIND_FP_FRAMES);
	s->sp = s->bp + 16;
	s->bp = frame[0];
#if defined(__TARGET_ARCH_arm64)
	// arm64's frame record {x29, x30} is laid out as x86-64's {rbp, return
	// address}; x30 may be signed (pac-ret).
	s->pc = frame[1] & USER_VA_MASK;
	s->lr_valid = 0;
	s->sp_valid = 0;
#else
	s->pc = frame[1];
#endif
	return 0;
}

// HotSpot's walk (hotspot_step) steps with frame pointers too.
#include "hotspot.h"

// python_step records one Python frame of the eval-loop C frame being
// replaced. A global function: the verifier checks it once, not once per
// state of the walk.
__noinline int python_step(struct unwind_state *s)
{
	struct python_proc *py;
	struct unwound_stack *out;
	__u32 zero = 0, len;
	__u64 f;

	if (!s)
		return 1;
	py = bpf_map_lookup_elem(&python_procs, &s->pid);
	if (!py) {
		s->py_more = 0;
		return 0;
	}
	f = python_frame_step(py, &s->py_frame, &s->py_more);
	out = bpf_map_lookup_elem(&unwind_scratch, &zero);
	len = s->len;
	if (!f || !out)
		return 0;
	if (len >= UNWIND_MAX_FRAMES)
		return 1;
	out->frames[len] = f;
	s->len = len + 1;
	s->hash = (s->hash ^ f) * 0x100000001b3ULL;
	return 0;
}

// v8_step decides whether the frame at pc of a V8 process is a JavaScript
// frame (v8.h); no_table: pc steps with frame pointers. A global function,
// like python_step.
__noinline int v8_step(struct unwind_state *s, __u64 pc, int no_table)
{
	struct v8_proc *v8;
	int builtin;

	if (!s)
		return 0;
	s->js_frame = 0;
	s->js_fp = 0;
	v8 = &s->v8_proc;
	builtin = pc >= v8->code_start && pc < v8->code_end;
	if ((!builtin && !no_table) || !s->bp_valid)
		return 0;
	s->js_fp = builtin;
	s->js_frame = js_frame(v8, s->bp);
	if (s->js_frame)
		count(COUNTER_JS_FRAMES);
	return 0;
}

#if defined(__TARGET_ARCH_arm64)
// arm64_step unwinds one frame with an arm64 row (unwind/arm64.go): the CFA
// from sp or x29, the return address from x30 (first frame, or one a signal
// interrupted) or from the stack, stripped of its pointer authentication
// code.
static __always_inline long arm64_step(struct unwind_state *s, struct unwind_row *row)
{
	__u64 base, cfa, slot, ra = 0, rec[2];

	switch (row->rule & RULE_MASK) {
	case RULE_END:
		count(COUNTER_UNWIND_COMPLETE);
		s->done = 1;
		return 1;
	case RULE_SIGNAL: {
		// __kernel_rt_sigreturn: sp is the struct rt_sigframe.
		__u64 sp = s->sp;
		count(COUNTER_UNWIND_SIGNAL);
		if (bpf_probe_read_user(&s->bp, sizeof(s->bp), (void *)(sp + SIGFRAME_A64_FP)) ||
		    bpf_probe_read_user(&s->lr, sizeof(s->lr), (void *)(sp + SIGFRAME_A64_LR)) ||
		    bpf_probe_read_user(&s->sp, sizeof(s->sp), (void *)(sp + SIGFRAME_A64_SP)) ||
		    bpf_probe_read_user(&s->pc, sizeof(s->pc), (void *)(sp + SIGFRAME_A64_PC))) {
			count(COUNTER_UNWIND_READ_ERRORS);
			return 1;
		}
		s->bp_valid = 1;
		s->lr_valid = 1;
		s->sp_valid = 1;
		s->exact_pc = 1;
		return 0;
	}
	case RULE_RSP:
		if (!s->sp_valid) {
			// Below code stepped with frame pointers: keep to them.
			if (frame_pointer_step(s))
				return 1;
			return s->done ? 1 : 0;
		}
		base = s->sp;
		break;
	case RULE_RBP:
		if (!s->bp_valid) {
			count(COUNTER_UNWIND_RBP_LOST);
			return 1;
		}
		base = s->bp;
		break;
	default:
		count(COUNTER_UNWIND_UNSUPPORTED);
		return 1;
	}
	cfa = base + (__u64)row->offset * 8;
	slot = ((row->rule & SLOT_FROM_REG) ? base : cfa) + (__s64)row->rbp * 8;
	switch (row->rule & RA_MASK) {
	case RA_IN_LR:
		// Past the first frame x30 is the callee's: not this frame's.
		if (!s->lr_valid) {
			count(COUNTER_UNWIND_UNSUPPORTED);
			return 1;
		}
		ra = s->lr;
		if (row->rbp == RBP_LOST) {
			s->bp_valid = 0;
		} else if (row->rbp != 0) {
			if (bpf_probe_read_user(&s->bp, sizeof(s->bp), (void *)slot)) {
				count(COUNTER_UNWIND_READ_ERRORS);
				return 1;
			}
			s->bp_valid = 1;
		}
		break;
	case RA_FRAME:
		if (bpf_probe_read_user(rec, sizeof(rec), (void *)slot)) {
			count(COUNTER_UNWIND_READ_ERRORS);
			return 1;
		}
		s->bp = rec[0];
		s->bp_valid = 1;
		ra = rec[1];
		break;
	default: // RA_SAVED, RA_SAVED_FP_LOST
		if (bpf_probe_read_user(&ra, sizeof(ra), (void *)slot)) {
			count(COUNTER_UNWIND_READ_ERRORS);
			return 1;
		}
		if ((row->rule & RA_MASK) == RA_SAVED_FP_LOST)
			s->bp_valid = 0;
	}
	s->lr_valid = 0;
	s->sp = cfa;
	s->sp_valid = 1;
	s->pc = ra & USER_VA_MASK;
	if (s->pc == 0) {
		count(COUNTER_UNWIND_COMPLETE);
		return 1;
	}
	return 0;
}
#endif

#if !defined(__TARGET_ARCH_arm64)
// cfa_register reads the general register named by a RULE_UNSUPPORTED row
// (CFA_REG_SHIFT) in the frame being stepped, whose registers are where
// regs_in says. Returns 0, 1 when the walk does not know it, -1 when it
// cannot be read.
static __always_inline int cfa_register(struct unwind_state *s, __u8 regs_in, __u32 n, __u64 *v)
{
	struct task_struct *task;
	__u64 regs, head[4]; // rip, cs, eflags, rsp
	__u32 reg = n - 1;

	if (n == 0 || n > 16 || reg == 6 || reg == 7)
		return 1;
	if (regs_in == REGS_SIGNAL)
		return bpf_probe_read_user(v, sizeof(*v), (void *)(s->regs_at + ((SIGCONTEXT_SLOTS >> (4 * reg)) & 15) * 8)) ? -1 : 0;
	if (regs_in != REGS_TASK)
		return 1;
	task = bpf_get_current_task_btf();
	regs = (__u64)bpf_task_pt_regs(task);
	if (!regs || bpf_probe_read_kernel(head, sizeof(head), (void *)(regs + PT_REGS_RIP)) ||
	    bpf_probe_read_kernel(v, sizeof(*v), (void *)(regs + ((PT_REGS_SLOTS >> (4 * reg)) & 15) * 8)))
		return -1;
	// A sample that interrupted user space has the registers the entry code
	// saved there; any other set is not this frame's.
	return head[0] == s->pc && head[3] == s->sp ? 0 : 1;
}
#endif

static long unwind_step(__u64 index, struct unwind_state *s)
{
	struct unwind_mapping_key key = {};
	struct unwind_mapping *m;
	struct unwind_row *row;
	struct unwound_stack *out;
	__u32 zero = 0, len = s->len;
	__u64 pc = s->pc, lookup_pc;
#if !defined(__TARGET_ARCH_arm64)
	__u64 cfa, ra;
	__u8 regs_in;
	int err;
#endif

	if (pc == 0 || s->done)
		return 1;
	out = bpf_map_lookup_elem(&unwind_scratch, &zero);
	if (!out || len >= UNWIND_MAX_FRAMES)
		return 1;
	// A return address follows its call: look up the call, which may be the
	// last instruction of a function that does not return.
	lookup_pc = !s->walked || s->exact_pc ? pc : pc - 1;
	if (s->py_more)
		return python_step(s) ? 1 : 0;
	if (lookup_pc >= s->jvm_start && lookup_pc < s->jvm_end) {
		s->regs_in = 0;
		return hotspot_step(s, lookup_pc) ? 1 : 0;
	}
	if (s->py_frame && !s->py_skip && lookup_pc >= s->eval_start && lookup_pc < s->eval_end) {
		// This C frame runs Python frames: record them instead.
		s->py_more = 1;
		s->py_skip = 1;
		return 0;
	}
	key.prefixlen = 96;
	key.pid = bpf_htonl(s->pid);
	key.addr = bpf_cpu_to_be64(lookup_pc);
	m = bpf_map_lookup_elem(&unwind_mappings, &key);
	row = NULL;
	if (!m) {
		count(COUNTER_UNWIND_NO_MAPPING);
		refresh(s->pid, REFRESH_MISS);
	} else if (m->rows != 0) {
		row = find_row(m, lookup_pc - m->bias);
		if (!row || row->rule == RULE_NONE) {
			count(COUNTER_UNWIND_NO_ROW);
			row = NULL;
		}
	}
	// JIT code, V8's builtins and code no row covers step with frame
	// pointers: in a V8 process, they may be JavaScript frames.
	s->js_frame = 0;
	s->js_fp = 0;
	if (s->v8 && !s->py_skip)
		v8_step(s, lookup_pc, !row);
	if (s->py_skip) {
		s->py_skip = 0;
	} else {
		__u64 v = s->js_frame ? s->js_frame : pc;
		out->frames[len] = v;
		s->len = len + 1;
		s->hash = (s->hash ^ v) * 0x100000001b3ULL;
	}
	s->walked = 1;
	s->exact_pc = 0;
#if !defined(__TARGET_ARCH_arm64)
	// Only the frame being stepped may use the registers.
	regs_in = s->regs_in;
	s->regs_in = 0;
#endif
	if (!row || s->js_fp) {
		if (frame_pointer_step(s))
			return 1;
		return s->done ? 1 : 0;
	}
#if defined(__TARGET_ARCH_arm64)
	return arm64_step(s, row);
#else
	switch (row->rule & RULE_MASK) {
	case RULE_END:
		count(COUNTER_UNWIND_COMPLETE);
		s->done = 1;
		return 1;
	case RULE_RSP:
		cfa = s->sp + (__u64)row->offset * 8;
		break;
	case RULE_RBP:
		if (!s->bp_valid) {
			count(COUNTER_UNWIND_RBP_LOST);
			return 1;
		}
		cfa = s->bp + (__u64)row->offset * 8;
		break;
	case RULE_PLT:
		cfa = s->sp + 8 + ((lookup_pc & 15) >= row->offset ? 8 : 0);
		break;
	case RULE_DEREF:
		if (bpf_probe_read_user(&cfa, sizeof(cfa), (void *)(s->sp + (__s64)(__s8)(row->offset & 0xff) * 8))) {
			count(COUNTER_UNWIND_READ_ERRORS);
			return 1;
		}
		cfa += (__u64)(row->offset >> 8) * 8;
		break;
	case RULE_UNSUPPORTED:
		err = cfa_register(s, regs_in, row->rule >> CFA_REG_SHIFT, &cfa);
		if (err) {
			count(err < 0 ? COUNTER_UNWIND_READ_ERRORS : COUNTER_UNWIND_UNSUPPORTED);
			return 1;
		}
		cfa += (__u64)row->offset * 8;
		break;
	case RULE_SIGNAL: {
		__u64 sp = s->sp;
		count(COUNTER_UNWIND_SIGNAL);
		if (bpf_probe_read_user(&s->bp, sizeof(s->bp), (void *)(sp + SIGFRAME_RBP)) ||
		    bpf_probe_read_user(&s->sp, sizeof(s->sp), (void *)(sp + SIGFRAME_RSP)) ||
		    bpf_probe_read_user(&s->pc, sizeof(s->pc), (void *)(sp + SIGFRAME_RIP))) {
			count(COUNTER_UNWIND_READ_ERRORS);
			return 1;
		}
		s->bp_valid = 1;
		s->exact_pc = 1;
		s->regs_in = REGS_SIGNAL;
		s->regs_at = sp + SIGFRAME_REGS;
		return 0;
	}
	default:
		count(COUNTER_UNWIND_UNSUPPORTED);
		return 1;
	}
	if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa - 8))) {
		count(COUNTER_UNWIND_READ_ERRORS);
		return 1;
	}
	if (row->rbp == RBP_LOST) {
		s->bp_valid = 0;
	} else if (row->rbp != 0) {
		if (bpf_probe_read_user(&s->bp, sizeof(s->bp), (void *)(cfa + (__s64)row->rbp * 8))) {
			count(COUNTER_UNWIND_READ_ERRORS);
			return 1;
		}
		s->bp_valid = 1;
	}
	s->sp = cfa;
	s->pc = ra;
	if (ra == 0) {
		// Threads started by clone end on a zero return address.
		count(COUNTER_UNWIND_COMPLETE);
		return 1;
	}
	return 0;
#endif
}

// The user registers a walk starts from, per architecture: the UAPI
// register set a perf event hands over (bpf_user_pt_regs_t), whether it
// interrupted user space, and its pc, stack and frame pointers. The kernel's
// saved copy (bpf_task_pt_regs) starts with the same layout on both.
#if defined(__TARGET_ARCH_arm64)
/* PSR_MODE_EL0t; a zeroed set (off-CPU walks) has pc 0: not user mode */
#define USER_MODE(r) (((r).pstate & 0xf) == 0 && (r).pc != 0)
#define REG_PC(r) ((r).pc)
#define REG_SP(r) ((r).sp)
#define REG_FP(r) ((r).regs[29])
#define REG_LR(r) ((r).regs[30])
#else
#define USER_MODE(r) (((r).cs & 3) == 3)
#define REG_PC(r) ((r).rip)
#define REG_SP(r) ((r).rsp)
#define REG_FP(r) ((r).rbp)
#endif

// user_regs sets the walk's start from the sampled task's user registers:
// the sample's own when it interrupted user space, else those saved on entry
// to the kernel (only those used are read: arm64's set is 272 bytes; arm64
// reads x30 too, the first frame's return address until its prologue saved
// it).
static __always_inline int user_regs(struct bpf_perf_event_data *ctx, struct unwind_state *s)
{
	if (USER_MODE(ctx->regs)) {
		s->pc = REG_PC(ctx->regs);
		s->sp = REG_SP(ctx->regs);
		s->bp = REG_FP(ctx->regs);
#if defined(__TARGET_ARCH_arm64)
		s->lr = REG_LR(ctx->regs);
		s->lr_valid = 1;
		s->sp_valid = 1;
#endif
		return 0;
	}
	struct task_struct *task = bpf_get_current_task_btf();
	bpf_user_pt_regs_t *uregs = (void *)bpf_task_pt_regs(task);
	if (!uregs)
		return -1;
	if (bpf_probe_read_kernel(&s->pc, sizeof(s->pc), &REG_PC(*uregs)) ||
	    bpf_probe_read_kernel(&s->sp, sizeof(s->sp), &REG_SP(*uregs)) ||
	    bpf_probe_read_kernel(&s->bp, sizeof(s->bp), &REG_FP(*uregs)))
		return -1;
#if defined(__TARGET_ARCH_arm64)
	if (bpf_probe_read_kernel(&s->lr, sizeof(s->lr), &REG_LR(*uregs)))
		return -1;
	s->lr_valid = 1;
	s->sp_valid = 1;
#endif
	return 0;
}

// unwind_user walks the user stack of a registered process into
// unwound_stacks and returns its hash, or 0 when the process is not
// registered (the caller keeps the frame-pointer stack id).
static __always_inline __u64 unwind_user(struct bpf_perf_event_data *ctx, __u32 pid, void *stacks)
{
	struct unwind_state s = {};
	struct unwound_stack *out;
	__u32 zero = 0;

	if (!bpf_map_lookup_elem(&unwind_processes, &pid)) {
		// The agent registers it at once if it is targeted; the mark of its
		// exec, not read yet, says so too. A kernel thread has no user stack.
		__u32 *why;

		if (bpf_map_lookup_elem(&unwind_ignored, &pid) ||
		    (bpf_get_current_task_btf()->flags & PF_KTHREAD))
			return 0;
		why = bpf_map_lookup_elem(&unwind_refresh, &pid);
		if (!why)
			refresh(pid, REFRESH_SAMPLED);
		else if (*why == REFRESH_EXEC)
			*why = REFRESH_EXEC_SAMPLED;
		return 0;
	}
	if (user_regs(ctx, &s)) {
		count(COUNTER_UNWIND_READ_ERRORS);
		return 0;
	}
	s.pid = pid;
	s.bp_valid = 1;
	s.regs_in = REGS_TASK;
	s.hash = 0xcbf29ce484222325ULL;
	count(COUNTER_UNWIND_STACKS);
	struct python_proc *py = bpf_map_lookup_elem(&python_procs, &pid);
	if (py) {
		s.py_frame = python_current_frame(py);
		s.eval_start = py->eval_start;
		s.eval_end = py->eval_end;
		if (s.py_frame)
			count(COUNTER_PYTHON_STACKS);
	}
	struct v8_proc *v8 = bpf_map_lookup_elem(&v8_procs, &pid);
	if (v8) {
		s.v8 = 1;
		s.v8_proc = *v8;
		count(COUNTER_JS_STACKS);
	}
	struct hotspot_proc *hs = bpf_map_lookup_elem(&hotspot_procs, &pid);
	if (hs) {
		s.jvm_start = hs->code_start;
		s.jvm_end = hs->code_end;
		count(COUNTER_JAVA_STACKS);
	}
	// Steps that record nothing (an eval-loop frame replaced, a shim
	// frame skipped) make room for more iterations than frames.
	bpf_loop(UNWIND_LOOP_STEPS, unwind_step, &s, 0);
	if (s.len >= UNWIND_MAX_FRAMES && !s.done && s.pc != 0)
		count(COUNTER_UNWIND_TRUNCATED);
	out = bpf_map_lookup_elem(&unwind_scratch, &zero);
	if (!out || s.len == 0)
		return 0;
	out->len = s.len;
	s.hash ^= s.len;
	if (s.hash == 0)
		s.hash = 1;
	if (bpf_map_update_elem(stacks, &s.hash, out, BPF_NOEXIST) != 0 &&
	    !bpf_map_lookup_elem(stacks, &s.hash)) {
		count(COUNTER_UNWIND_STACKS_FULL);
		return 0;
	}
	return s.hash;
}

// A new program: the agent reads its identity at once and, if it is
// targeted, registers it (ld.so maps its libraries meanwhile; the first
// sample that finds one mapped after the registration marks it again). A registered process's
// mappings are the old program's: until the agent registers it again, the
// kernel's frame-pointer walk is right and the tables would not be. The mark
// is set before the pid leaves unwind_ignored: an agent that ignores the pid
// meanwhile finds the mark and takes its decision back.
SEC("raw_tp/sched_process_exec")
int unwind_exec(void *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	__u32 why = REFRESH_EXEC, *old;

	old = bpf_map_lookup_elem(&unwind_ignored, &pid);
	if (old && *old == IGNORE_STICKY)
		return 0;
	bpf_map_delete_elem(&unwind_processes, &pid);
	// An exec outranks the other reasons (a sample of the old program
	// marked it before, unread).
	if (bpf_map_update_elem(&unwind_refresh, &pid, &why, BPF_NOEXIST) == 0)
		bpf_ringbuf_output(&unwind_wakeup, &pid, sizeof(pid), 0);
	else if ((old = bpf_map_lookup_elem(&unwind_refresh, &pid)))
		*old = REFRESH_EXEC;
	bpf_map_delete_elem(&unwind_ignored, &pid);
	return 0;
}

// struct task_struct (CO-RE) is in python.h.
// A registered process forked: the child maps what its parent did. Any new
// process: its pid may be an ignored process's, gone; the child of a
// process ignored for its cgroup is ignored too.
SEC("tp_btf/sched_process_fork")
int BPF_PROG(unwind_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ppid = parent->tgid, pid = child->tgid, *ign;

	if (pid == ppid)
		return 0; // a thread
	ign = bpf_map_lookup_elem(&unwind_ignored, &ppid);
	if (ign && *ign == IGNORE_STICKY)
		bpf_map_update_elem(&unwind_ignored, &pid, ign, BPF_ANY);
	else
		bpf_map_delete_elem(&unwind_ignored, &pid);
	if (bpf_map_lookup_elem(&unwind_processes, &ppid))
		refresh(pid, REFRESH_FORK);
	return 0;
}

// A process moved to another cgroup (a service manager placing a child
// before its exec, `echo $$ >cgroup.procs`): the agent reads it again,
// whatever it decided before. Once per hierarchy on cgroup v1.
struct cgroup;
SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(unwind_cgroup, struct cgroup *dst, const char *path, struct task_struct *task, _Bool threadgroup)
{
	__u32 pid = task->tgid, why = REFRESH_CGROUP, *old;

	if (bpf_map_update_elem(&unwind_refresh, &pid, &why, BPF_NOEXIST) == 0)
		bpf_ringbuf_output(&unwind_wakeup, &pid, sizeof(pid), 0);
	else if ((old = bpf_map_lookup_elem(&unwind_refresh, &pid)) && *old != REFRESH_EXEC)
		*old = REFRESH_CGROUP;
	bpf_map_delete_elem(&unwind_ignored, &pid);
	return 0;
}

//go:build ignore

// SPDX-License-Identifier: GPL-2.0
//
// CPU profiler (and, in offcpu.h, off-CPU time): a perf_event program attached to a software CPU clock on every
// online CPU. Each sample is counted in the current generation's map, keyed by
// (pid, user stack, kernel stack, comm). User space flips `generation` each
// interval and drains the idle generation, so draining never races with
// recording.

#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

// Kept in sync with sampler.MaxStackDepth in Go.
#define MAX_STACK_DEPTH 127

// Indexes of the `counters` array, mirrored in Go (Counter*).
#define COUNTER_SAMPLES 0
#define COUNTER_USER_STACK_ERRORS 1
#define COUNTER_KERNEL_STACK_ERRORS 2
#define COUNTER_COUNTS_FULL 3
// Unwinding with tables (unwind.h).
#define COUNTER_UNWIND_STACKS 4       // stacks walked with tables
#define COUNTER_UNWIND_COMPLETE 5     // ... that reached the outermost frame
#define COUNTER_UNWIND_FP_FRAMES 6    // frames stepped with frame pointers (no table)
#define COUNTER_UNWIND_NO_ROW 7       // addresses of a table covered by no row
#define COUNTER_UNWIND_UNSUPPORTED 8  // rows the unwinder cannot follow
#define COUNTER_UNWIND_SIGNAL 9       // signal frames unwound through
#define COUNTER_UNWIND_RBP_LOST 10    // a CFA from rbp after rbp was lost
#define COUNTER_UNWIND_READ_ERRORS 11 // user memory that could not be read
#define COUNTER_UNWIND_TRUNCATED 12   // stacks deeper than UNWIND_MAX_FRAMES
#define COUNTER_UNWIND_STACKS_FULL 13 // unwound-stack map full: frame pointers used
#define COUNTER_UNWIND_NO_MAPPING 14 // addresses of a registered process in no registered mapping
// CPython frames (python.h).
#define COUNTER_PYTHON_STACKS 15    // samples of a Python process with a current frame
#define COUNTER_PYTHON_FRAMES 16    // Python frames recorded
#define COUNTER_PYTHON_NO_THREAD 17 // samples of a Python process whose thread state was not found
// JavaScript frames (v8.h).
#define COUNTER_JS_STACKS 18 // samples of a V8 process walked with tables
#define COUNTER_JS_FRAMES 19 // JavaScript frames recorded
// Java frames (hotspot.h).
#define COUNTER_JAVA_STACKS 20  // samples of a HotSpot process walked with tables
#define COUNTER_JAVA_FRAMES 21  // Java frames recorded
#define COUNTER_JAVA_NO_BLOB 22 // code cache addresses in no blob found
#define COUNTER_MAX 23

#define TASK_COMM_LEN 16

struct sample_key {
	__u32 pid;
	__s32 user_stack_id;
	__s32 kernel_stack_id;
	__u32 pad;
	// Nonzero: the user stack was unwound with tables and is in
	// unwound_stacks_N under this hash; user_stack_id is then -1.
	__u64 user_stack_hash;
	char comm[TASK_COMM_LEN];
};

struct sample_value {
	__u64 count;
	// Sum of the sampling periods: nanoseconds of CPU time for the CPU clock.
	__u64 period_ns;
};

// max_entries are placeholders: the agent resizes the maps before loading.
#define COUNTS_MAP(name)                               \
	struct {                                       \
		__uint(type, BPF_MAP_TYPE_HASH);       \
		__uint(max_entries, 10240);            \
		__type(key, struct sample_key);        \
		__type(value, struct sample_value);    \
	} name SEC(".maps")

#define STACKS_MAP(name)                                               \
	struct {                                                       \
		__uint(type, BPF_MAP_TYPE_STACK_TRACE);                \
		__uint(max_entries, 10240);                            \
		__uint(key_size, sizeof(__u32));                       \
		__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));   \
	} name SEC(".maps")

COUNTS_MAP(counts_0);
COUNTS_MAP(counts_1);
STACKS_MAP(stacks_0);
STACKS_MAP(stacks_1);

// generation[0] selects which (counts_N, stacks_N) pair records; user space
// flips it.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} generation SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		(*v)++;
}

#include "unwind.h"
// Off-CPU time (sched_switch), walked with the same stack walkers.
#include "offcpu.h"

static __always_inline int record(struct bpf_perf_event_data *ctx, void *counts, void *stacks, void *unwound, __u64 period)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct sample_key key = {};
	struct sample_value one = { .count = 1, .period_ns = period };
	struct sample_value *val;

	key.pid = id >> 32;
	bpf_get_current_comm(&key.comm, sizeof(key.comm));
	key.kernel_stack_id = bpf_get_stackid(ctx, stacks, 0);
	key.user_stack_hash = unwind_user(ctx, key.pid, unwound);
	if (key.user_stack_hash)
		key.user_stack_id = -1;
	else
		key.user_stack_id = bpf_get_stackid(ctx, stacks, BPF_F_USER_STACK);
	// A kernel thread has no user stack (-EFAULT): not an error.
	if (key.user_stack_id < 0 && key.user_stack_id != -14 && !key.user_stack_hash)
		count(COUNTER_USER_STACK_ERRORS);
	if (key.kernel_stack_id < 0 && key.kernel_stack_id != -14)
		count(COUNTER_KERNEL_STACK_ERRORS);

	val = bpf_map_lookup_elem(counts, &key);
	if (val) {
		__sync_fetch_and_add(&val->count, 1);
		__sync_fetch_and_add(&val->period_ns, period);
		return 0;
	}
	if (bpf_map_update_elem(counts, &key, &one, BPF_NOEXIST) != 0) {
		// Lost the race to another CPU inserting the same key, or full.
		val = bpf_map_lookup_elem(counts, &key);
		if (!val) {
			count(COUNTER_COUNTS_FULL);
			return 0;
		}
		__sync_fetch_and_add(&val->count, 1);
		__sync_fetch_and_add(&val->period_ns, period);
	}
	return 0;
}

SEC("perf_event")
int profile_cpu(struct bpf_perf_event_data *ctx)
{
	__u32 zero = 0;
	__u32 *gen;
	__u64 id = bpf_get_current_pid_tgid();

	// The idle task: nothing ran.
	if ((__u32)id == 0)
		return 0;
	count(COUNTER_SAMPLES);

	gen = bpf_map_lookup_elem(&generation, &zero);
	if (gen && *gen == 1)
		return record(ctx, &counts_1, &stacks_1, &unwound_stacks_1, ctx->sample_period);
	return record(ctx, &counts_0, &stacks_0, &unwound_stacks_0, ctx->sample_period);
}

char LICENSE[] SEC("license") = "GPL";

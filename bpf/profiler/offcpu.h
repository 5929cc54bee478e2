// SPDX-License-Identifier: GPL-2.0
//
// Off-CPU profiler: time user threads spend switched out (blocked in a
// syscall, sleeping, waiting on a lock or for a CPU), with the stack they
// switched out at.
//
// sched_switch fires in the thread switching out (prev is current), so its
// stacks are walked there, with the CPU sampler's walkers and into the same
// stack maps. A switch-out is recorded with probability offcpu_threshold /
// 2^32 (the cost stays bounded on hosts that switch millions of times a
// second); its start time and stacks wait in offcpu_starts until the thread
// switches in, when the time blocked is added to the current generation's
// offcpu_counts if it is at least offcpu_min_ns.
//
// A block may start in one generation and end in the next: its key then
// names the generation whose stack maps hold its stacks (stack_gen), and the
// agent keeps those stacks when it drains that generation (sampler.Drain).

// Kept in sync with sampler's offCPU* constants in Go.
#define OFFCPU_TASK_DEAD 0x80       // TASK_DEAD: the last switch-out of an exiting thread
#define OFFCPU_PF_KTHREAD 0x00200000 // PF_KTHREAD

// Indexes of the `offcpu_counters` array, mirrored in Go (OffCPUCounter*).
// Not every switch-out is counted: a counter costs as much as a tenth of
// the program's run time (the host's count is ctxt in /proc/stat).
#define OFFCPU_COUNTER_RECORDED 0     // switch-outs of user threads recorded: stacks walked
#define OFFCPU_COUNTER_BLOCKS 1       // blocks counted at switch-in
#define OFFCPU_COUNTER_SHORT 2        // blocks shorter than offcpu_min_ns, dropped
#define OFFCPU_COUNTER_STARTS_FULL 3  // offcpu_starts full: switch-out not recorded
#define OFFCPU_COUNTER_COUNTS_FULL 4  // offcpu_counts full: block lost
#define OFFCPU_COUNTER_STACK_ERRORS 5 // a kernel or user stack not stored (bucket taken, map full)
#define OFFCPU_COUNTER_MAX 6

// Rewritten by the agent before loading. A switch-out is recorded when a
// random 32-bit number is below offcpu_threshold: 0 never, 1 << 32 always.
volatile const __u64 offcpu_threshold = 0;
// Blocks shorter than this are dropped at switch-in.
volatile const __u64 offcpu_min_ns = 0;

struct offcpu_key {
	struct sample_key stack; // as for CPU samples: pid, stacks, comm
	__u32 stack_gen;         // the generation whose maps hold the stacks
	__u32 pad;
};

struct offcpu_start {
	__u64 start_ns;
	struct offcpu_key key;
};

// Threads switched out and recorded, by thread ID.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384); // resized before loading
	__type(key, __u32);
	__type(value, struct offcpu_start);
} offcpu_starts SEC(".maps");

// Set on a thread while it has an entry in offcpu_starts: a switch-in reads
// this first, which costs less than the hash lookup most switches would
// make in vain.
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u8);
} offcpu_pending SEC(".maps");

// Values: count = blocks, period_ns = nanoseconds blocked.
#define OFFCPU_COUNTS_MAP(name)                        \
	struct {                                       \
		__uint(type, BPF_MAP_TYPE_HASH);       \
		__uint(max_entries, 10240);            \
		__type(key, struct offcpu_key);        \
		__type(value, struct sample_value);    \
	} name SEC(".maps")

OFFCPU_COUNTS_MAP(offcpu_counts_0);
OFFCPU_COUNTS_MAP(offcpu_counts_1);

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, OFFCPU_COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} offcpu_counters SEC(".maps");

// The walker takes a perf event's context for the sampled registers; at a
// switch-out the thread is in the kernel (cs 0 here), so it reads the user
// registers saved on kernel entry.
static struct bpf_perf_event_data offcpu_in_kernel;

// Only the fields read, relocated against the kernel's BTF (CO-RE).
struct task_struct___offcpu {
	int pid;
	int tgid;
	unsigned int flags;
} __attribute__((preserve_access_index));

static __always_inline void offcpu_count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&offcpu_counters, &idx);
	if (v)
		(*v)++;
}

static __always_inline __u32 current_generation(void)
{
	__u32 zero = 0;
	__u32 *gen = bpf_map_lookup_elem(&generation, &zero);

	return gen && *gen == 1 ? 1 : 0;
}

// offcpu_add adds one block of blocked_ns to the current generation.
static __always_inline void offcpu_add(struct offcpu_key *key, __u64 blocked_ns)
{
	void *counts = current_generation() ? (void *)&offcpu_counts_1 : (void *)&offcpu_counts_0;
	struct sample_value one = { .count = 1, .period_ns = blocked_ns };
	struct sample_value *val;

	offcpu_count(OFFCPU_COUNTER_BLOCKS);
	val = bpf_map_lookup_elem(counts, key);
	if (!val) {
		if (bpf_map_update_elem(counts, key, &one, BPF_NOEXIST) == 0)
			return;
		// Another CPU inserted the same key, or the map is full.
		val = bpf_map_lookup_elem(counts, key);
		if (!val) {
			offcpu_count(OFFCPU_COUNTER_COUNTS_FULL);
			return;
		}
	}
	__sync_fetch_and_add(&val->count, 1);
	__sync_fetch_and_add(&val->period_ns, blocked_ns);
}

// offcpu_record walks the stacks of the current thread, about to switch out,
// and remembers them with the time.
static __always_inline void offcpu_record(void *ctx, __u32 tid, struct task_struct *task)
{
	__u8 *pending;
	struct offcpu_start st = {};
	__u64 id = bpf_get_current_pid_tgid();
	__u32 gen = current_generation();
	void *stacks = gen ? (void *)&stacks_1 : (void *)&stacks_0;
	void *unwound = gen ? (void *)&unwound_stacks_1 : (void *)&unwound_stacks_0;

	offcpu_count(OFFCPU_COUNTER_RECORDED);
	st.key.stack_gen = gen;
	st.key.stack.pid = id >> 32;
	bpf_get_current_comm(&st.key.stack.comm, sizeof(st.key.stack.comm));
	st.key.stack.kernel_stack_id = bpf_get_stackid(ctx, stacks, 0);
	st.key.stack.user_stack_hash = unwind_user(&offcpu_in_kernel, st.key.stack.pid, unwound);
	if (st.key.stack.user_stack_hash)
		st.key.stack.user_stack_id = -1;
	else
		st.key.stack.user_stack_id = bpf_get_stackid(ctx, stacks, BPF_F_USER_STACK);
	// -EFAULT: no user stack (a thread in its first switch-out).
	if (st.key.stack.kernel_stack_id < 0 ||
	    (st.key.stack.user_stack_id < 0 && st.key.stack.user_stack_id != -14 && !st.key.stack.user_stack_hash))
		offcpu_count(OFFCPU_COUNTER_STACK_ERRORS);
	// The walk ran on this CPU before the switch: the block starts after it.
	st.start_ns = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&offcpu_starts, &tid, &st, BPF_ANY) != 0) {
		offcpu_count(OFFCPU_COUNTER_STARTS_FULL);
		return;
	}
	pending = bpf_task_storage_get(&offcpu_pending, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (pending)
		*pending = 1;
	else if (bpf_map_delete_elem(&offcpu_starts, &tid) == 0)
		// No storage: the switch-in would not look. Counted as a start
		// not kept, so the agent clears the stacks it left.
		offcpu_count(OFFCPU_COUNTER_STARTS_FULL);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, _Bool preempt, struct task_struct *prev_task, struct task_struct *next_task, unsigned int prev_state)
{
	struct task_struct___offcpu *prev = (void *)prev_task, *next = (void *)next_task;
	struct offcpu_start *st = NULL;
	__u32 tid = next->pid;
	__u8 *pending;

	// The thread switching in ends its block, if it was recorded.
	pending = bpf_task_storage_get(&offcpu_pending, next_task, 0, 0);
	if (pending && *pending) {
		*pending = 0;
		st = bpf_map_lookup_elem(&offcpu_starts, &tid);
	}
	if (st) {
		__u64 blocked = bpf_ktime_get_ns() - st->start_ns;
		struct offcpu_key key = st->key;

		bpf_map_delete_elem(&offcpu_starts, &tid);
		if (blocked >= offcpu_min_ns && (__s64)blocked > 0)
			offcpu_add(&key, blocked);
		else
			offcpu_count(OFFCPU_COUNTER_SHORT);
	}

	tid = prev->pid;
	// The idle task, kernel threads and exiting threads never switch in
	// (again) as user code.
	if (tid == 0 || (prev->flags & OFFCPU_PF_KTHREAD) || (prev_state & OFFCPU_TASK_DEAD))
		return 0;
	if ((__u64)bpf_get_prandom_u32() >= offcpu_threshold)
		return 0;
	offcpu_record(ctx, tid, prev_task);
	return 0;
}

// SPDX-License-Identifier: GPL-2.0
//
// A test entry into the walk of bpf/profiler/unwind.h, built for arm64
// (-D__TARGET_ARCH_arm64: arm64_step) by TestArm64BPFWalk
// (arm64bpf_test.go) and run with BPF_PROG_TEST_RUN in the test's own
// process, where an arm64 stack copied under qemu is mapped at its address:
// the walk starts from walk_input's registers, as unwind_user would from a
// sample's, and leaves its frames in walk_output.

#include "profile.bpf.c"

struct walk_in {
	__u64 pc, sp, fp, lr;
	__u32 pid, pad;
};

struct walk_out {
	__u64 len, done;
	__u64 frames[UNWIND_MAX_FRAMES];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct walk_in);
} walk_input SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct walk_out);
} walk_output SEC(".maps");

SEC("raw_tp")
int walk_test(void *ctx)
{
	__u32 zero = 0;
	struct walk_in *in = bpf_map_lookup_elem(&walk_input, &zero);
	struct walk_out *res = bpf_map_lookup_elem(&walk_output, &zero);
	struct unwound_stack *out = bpf_map_lookup_elem(&unwind_scratch, &zero);
	struct unwind_state s = {};

	if (!in || !res || !out)
		return 1;
	s.pc = in->pc;
	s.sp = in->sp;
	s.bp = in->fp;
	s.lr = in->lr;
	s.lr_valid = 1;
	s.sp_valid = 1;
	s.bp_valid = 1;
	s.pid = in->pid;
	bpf_loop(UNWIND_LOOP_STEPS, unwind_step, &s, 0);
	res->len = s.len;
	res->done = s.done;
	for (int i = 0; i < UNWIND_MAX_FRAMES; i++) {
		if (i >= s.len)
			break;
		res->frames[i] = out->frames[i];
	}
	return 0;
}

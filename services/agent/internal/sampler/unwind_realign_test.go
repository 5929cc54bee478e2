package sampler

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// realignC: leaf is assembly that realigns the stack as OpenSSL's perlasm
// does, its hot loop under one of two CFA rules (-DDEREF: the expression
// *(rsp+16)+16 written with .cfi_escape, RuleDeref; else rax+8, a register
// CFA) with rbp saved at CFA-16; b, a and main are C at -O2
// -fomit-frame-pointer. With -DSIGNAL a timer's handler, which never
// returns, interrupts leaf: the walk must take rax from the signal frame.
const realignC = `
#include <signal.h>
#include <stdlib.h>
#include <sys/time.h>
volatile unsigned long sink;
unsigned long leaf(unsigned long n);
#ifdef DEREF
__asm__(".text\n.globl leaf\n.type leaf,@function\nleaf:\n.cfi_startproc\n"
	"push %rbp\n.cfi_def_cfa_offset 16\n.cfi_offset rbp,-16\n"
	"mov %rsp,%rax\nsub $128,%rsp\nand $-64,%rsp\nmov %rax,16(%rsp)\n"
	/* DW_CFA_def_cfa_expression: DW_OP_breg7 16; DW_OP_deref; DW_OP_plus_uconst 16 */
	".cfi_escape 0x0f,0x05,0x77,0x10,0x06,0x23,0x10\n"
	"mov %rdi,%rcx\nxor %eax,%eax\n"
	"1: imul %rdi,%rax\nadd %rcx,%rax\ndec %rcx\njnz 1b\n"
	"mov 16(%rsp),%rsp\n.cfi_def_cfa rsp,16\n"
	"pop %rbp\n.cfi_def_cfa_offset 8\n.cfi_restore rbp\nret\n.cfi_endproc\n.size leaf,.-leaf\n");
#else
__asm__(".text\n.globl leaf\n.type leaf,@function\nleaf:\n.cfi_startproc\n"
	"mov %rsp,%rax\n.cfi_def_cfa_register rax\n"
	"push %rbp\n.cfi_offset rbp,-16\n"
	"sub $256,%rsp\nand $-32,%rsp\n"
	"mov %rdi,%rcx\nxor %edx,%edx\n"
	"1: imul %rdi,%rdx\nadd %rcx,%rdx\ndec %rcx\njnz 1b\n"
	"mov -8(%rax),%rbp\nmov %rax,%rsp\n.cfi_def_cfa_register rsp\n.cfi_restore rbp\n"
	"mov %rdx,%rax\nret\n.cfi_endproc\n.size leaf,.-leaf\n");
#endif
__attribute__((noinline, noipa)) unsigned long b(unsigned long n) {
	unsigned long buf[16];
	for (int i = 0; i < 16; i++) buf[i] = leaf(n + i);
	return buf[n % 16] + 1;
}
__attribute__((noinline, noipa)) unsigned long a(unsigned long n) { return b(n) * 3 + 1; }
__attribute__((noinline, noipa)) void handler_leaf(void) { for (;;) sink++; }
__attribute__((noinline, noipa)) void on_alarm(int sig) { handler_leaf(); sink += sig; }
int main(int argc, char **argv) {
	unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 1000;
#ifdef SIGNAL
	struct itimerval it = { .it_value = { .tv_usec = 20000 } };
	signal(SIGALRM, on_alarm);
	setitimer(ITIMER_REAL, &it, 0);
#endif
	for (;;) sink += a(n);
}
`

// TestUnwindRealignedStack: samples in a hot loop whose CFA is *(rsp+N)+K
// or rax+8 have the whole chain leaf <- b <- a <- main <- libc <- _start.
func TestUnwindRealignedStack(t *testing.T) {
	for _, tc := range []struct {
		name string
		flag string
	}{
		{"deref", "-DDEREF"},
		{"rax", "-DRAX"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := buildC(t, realignC, "-O2", "-fomit-frame-pointer", tc.flag)
			stacks, counts, c, _ := unwindRun(t, exec.Command(bin, "5000"), 2*time.Second)
			share, depth, total := summarize(stacks, counts)
			t.Logf("%d samples, %.1f%% complete, median depth %d; counters %+v", total, 100*share, depth, c)
			if total < 50 {
				t.Fatalf("only %d samples", total)
			}
			if exact := exactChain(t, stacks, counts, total); exact*100 < total*99 {
				t.Fatalf("%d of %d samples have leaf <- b <- a <- main <- libc <- _start", exact, total)
			}
		})
	}
}

// TestUnwindRealignedSignal: a signal interrupts leaf, whose CFA is rax+8;
// its handler never returns. The walk takes rax from the kernel's signal
// frame: handler_leaf <- on_alarm <- __restore_rt <- leaf <- b <- a <- main
// <- ... <- _start. (Past the first frame without a signal frame rax is
// unknown: the agent stops there, as the aes-256-gcm case of
// TestUnwindOpenSSL shows.)
func TestUnwindRealignedSignal(t *testing.T) {
	// Long loops: the signal lands in leaf's loop, not in b.
	bin := buildC(t, realignC, "-O2", "-fomit-frame-pointer", "-DSIGNAL")
	stacks, counts, c, _ := unwindRun(t, exec.Command(bin, "4000000"), time.Second)
	share, depth, total := summarize(stacks, counts)
	t.Logf("%d samples, %.1f%% complete, median depth %d; counters %+v", total, 100*share, depth, c)
	if total < 20 {
		t.Fatalf("only %d samples", total)
	}
	var exact uint64
	for i, st := range stacks {
		if len(st) >= 9 && st[0] == "prog:handler_leaf" && st[1] == "prog:on_alarm" && strings.HasPrefix(st[2], "libc.so.6:") &&
			strings.Join(st[3:7], " ") == "prog:leaf prog:b prog:a prog:main" && st[len(st)-1] == "prog:_start" {
			exact += counts[i]
			continue
		}
		t.Errorf("%d samples: %s", counts[i], strings.Join(st, " <- "))
	}
	if exact*100 < total*99 {
		t.Fatalf("%d of %d samples have handler_leaf <- on_alarm <- __restore_rt <- leaf <- b <- a <- main ... _start", exact, total)
	}
	if c.UnwindSignal == 0 {
		t.Fatalf("counters %+v: no signal frame", c)
	}
}

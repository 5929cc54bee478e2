// An arm64 program for TestArm64WalkSnapshot (arm64qemu_test.go): at a known
// call chain it records its registers and a copy of its stack, as a sample
// would find them, and writes them to argv[1] with its /proc/self/maps.
//
//   plain:  main <- a <- dyn <- b <- big <- deep x6 <- leaf
//   qsort:  main <- qsort (libc) <- cmp <- leaf: libc between the program's
//           frames, walked with frame pointers when its table is dropped
//   signal: main <- spin, interrupted by SIGALRM: spin <- restorer <- handler
//           <- hchain <- leaf. The handler is installed with the kernel's
//           own rt_sigaction and SA_RESTORER, so that its return goes through
//           a trampoline with the CFI of the vDSO's __kernel_rt_sigreturn.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

extern void *__libc_stack_end;
volatile unsigned long sink;
static volatile int done;

// Header: pc, sp, x29, x30 at the capture, the stack copy's address and
// length; then the copy.
static unsigned long snap[6];
static unsigned char stack_copy[1 << 17];

// leaf records the registers at the asm and copies the stack from sp up to
// past _start's frame. It calls nothing: x30 is its return address.
__attribute__((noinline, noipa)) unsigned long leaf(unsigned long n)
{
	unsigned long pc, sp, fp, lr;
	__asm__ volatile("adr %0, .\n\tmov %1, sp\n\tmov %2, x29\n\tmov %3, x30"
			 : "=r"(pc), "=r"(sp), "=r"(fp), "=r"(lr));
	unsigned long end = (unsigned long)__libc_stack_end + 256;
	unsigned long len = end - sp;
	if (len > sizeof(stack_copy))
		len = sizeof(stack_copy);
	for (unsigned long i = 0; i < len; i += 8)
		*(unsigned long *)(stack_copy + i) = *(volatile unsigned long *)(sp + i);
	snap[0] = pc, snap[1] = sp, snap[2] = fp, snap[3] = lr, snap[4] = sp, snap[5] = len;
	return n * 3 + 1;
}

__attribute__((noinline, noipa)) unsigned long deep(unsigned long n, int depth)
{
	volatile unsigned long keep = n; // read after the call: no loop
	if (depth == 0)
		return leaf(n) + keep;
	return deep(n + 1, depth - 1) * 7 + keep;
}

// A frame with kilobytes of locals: GCC saves x30 at its bottom.
__attribute__((noinline, noipa)) unsigned long big(unsigned long n)
{
	volatile unsigned long buf[1024];
	for (int i = 0; i < 1024; i++)
		buf[i] = n + i;
	return deep(buf[n % 1024], 5) + buf[3];
}

__attribute__((noinline, noipa)) unsigned long b(unsigned long n)
{
	unsigned long buf[64];
	for (int i = 0; i < 64; i++)
		buf[i] = n * i;
	return big(buf[n % 64]) + 1;
}

// alloca: GCC's CFA is x29-based here, and with 2 KiB of locals below the
// frame record, its slot is out of a row's reach from the CFA: from x29.
__attribute__((noinline, noipa)) unsigned long dyn(unsigned long n)
{
	volatile unsigned long fixed[256];
	volatile unsigned long *p = __builtin_alloca(64 + (n % 8) * 16);
	p[0] = n;
	fixed[n % 256] = n;
	return b(p[0] + fixed[n % 256]) + 1;
}

__attribute__((noinline, noipa)) unsigned long a(unsigned long n) { return dyn(n) * 3 + 1; }

static int captured;

__attribute__((noinline, noipa)) int cmp(const void *x, const void *y)
{
	unsigned long a = *(const unsigned long *)x, b = *(const unsigned long *)y;
	if (!captured) {
		captured = 1;
		sink += leaf(a);
	}
	return a < b ? -1 : a > b;
}

__attribute__((noinline, noipa)) unsigned long hchain(unsigned long n) { return leaf(n) + 2; }

static void handler(int sig)
{
	sink += hchain(sig);
	done = 1;
}

// spin runs until the handler is done: the interrupted frame, a leaf.
__attribute__((noinline, noipa)) void spin(void)
{
	while (!done)
		sink++;
}

// restorer is a sigreturn trampoline with the CFI of the arm64 vDSO's
// (arch/arm64/kernel/vdso/sigreturn.S): a signal frame whose CFA is x29,
// and a nop before the symbol so that its return address minus one is in
// the FDE.
__asm__(".text\n"
	".globl restorer_fde\n"
	".type restorer_fde, %function\n"
	"restorer_fde:\n"
	".cfi_startproc\n"
	".cfi_signal_frame\n"
	".cfi_def_cfa x29, 0\n"
	".cfi_offset x29, 0\n"
	".cfi_offset x30, 8\n"
	"nop\n"
	".globl restorer\n"
	".type restorer, %function\n"
	"restorer:\n"
	"mov x8, #139\n" // __NR_rt_sigreturn
	"svc #0\n"
	".cfi_endproc\n");
void restorer(void);

// The kernel's struct sigaction (no glibc wrapper: it sets no restorer).
struct ksigaction {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	unsigned long mask;
};

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	if (strcmp(argv[2], "signal") == 0) {
		struct ksigaction sa = { handler, 0x04000000 /* SA_RESTORER */, restorer, 0 };
		if (syscall(SYS_rt_sigaction, SIGALRM, &sa, NULL, 8) != 0)
			return 3;
		struct itimerval it = { { 0, 0 }, { 0, 20000 } };
		setitimer(ITIMER_REAL, &it, NULL);
		spin();
	} else if (strcmp(argv[2], "qsort") == 0) {
		unsigned long v[64];
		for (int i = 0; i < 64; i++)
			v[i] = (i * 37) % 64;
		qsort(v, 64, sizeof(v[0]), cmp);
		sink += v[argc];
	} else {
		sink += a(argc);
	}
	int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return 4;
	write(fd, snap, sizeof(snap));
	write(fd, stack_copy, snap[5]);
	int maps = open("/proc/self/maps", O_RDONLY);
	char buf[4096];
	ssize_t n;
	while (maps >= 0 && (n = read(maps, buf, sizeof(buf))) > 0)
		write(fd, buf, n);
	return close(fd);
}

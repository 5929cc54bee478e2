// A workload with one known hot function, built with frame pointers so the
// agent can walk its stack.
#include <stdint.h>

__attribute__((noinline)) uint64_t e2e_hot_loop(uint64_t n) {
	volatile uint64_t x = 0;
	for (uint64_t i = 0; i < n; i++) x += i * 2654435761u;
	return x;
}

__attribute__((noinline)) uint64_t e2e_caller(void) { return e2e_hot_loop(400000000ull); }

int main(void) {
	for (;;) e2e_caller();
}

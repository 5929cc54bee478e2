package profiler

// MaxStackDepth is the number of frames a stack trace map value holds.
//
//	#define MAX_STACK_DEPTH 127
const MaxStackDepth = 127

// Indexes of the per-CPU `counters` array.
const (
	CounterSamples           = 0 // #define COUNTER_SAMPLES 0
	CounterUserStackErrors   = 1 // #define COUNTER_USER_STACK_ERRORS 1
	CounterKernelStackErrors = 2 // #define COUNTER_KERNEL_STACK_ERRORS 2
	CounterCountsFull        = 3 // #define COUNTER_COUNTS_FULL 3
	NumCounters              = 4 // #define COUNTER_MAX 4
)

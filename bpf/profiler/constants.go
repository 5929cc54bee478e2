package profiler

// MaxStackDepth is the number of frames a stack trace map value holds.
//
//	#define MAX_STACK_DEPTH 127
const MaxStackDepth = 127

// MaxUnwindDepth is the number of frames the table-driven unwinder walks.
//
//	#define UNWIND_MAX_FRAMES 128
const MaxUnwindDepth = 128

// A Python frame in an unwound stack (python.h): the flag, the index of the
// code unit executing (saturated), and the code object's address >> 3.
const (
	PythonFrameFlag  = 1 << 63   // #define PY_FRAME_FLAG (1ULL << 63)
	PythonInstrShift = 45        // #define PY_INSTR_SHIFT 45
	PythonInstrMax   = 1<<18 - 1 // #define PY_INSTR_MAX ((1ULL << 18) - 1)
	PythonCodeMask   = 1<<45 - 1 // #define PY_CODE_MASK ((1ULL << 45) - 1)
	PythonNoOffset   = 0xffff    // #define PY_NO_OFFSET 0xffff
	PythonMaxThreads = 32        // #define PY_MAX_THREADS 32
)

// A JavaScript frame in an unwound stack (v8.h): the flag and the tagged
// pointer of the frame's SharedFunctionInfo.
const (
	JSFrameFlag   = 1 << 62   // #define JS_FRAME_FLAG (1ULL << 62)
	JSPointerMask = 1<<47 - 1 // #define JS_POINTER_MASK ((1ULL << 47) - 1)
)

// A Java frame in an unwound stack (hotspot.h): the flag and the Method*.
const (
	JavaFrameFlag   = 1 << 61   // #define JAVA_FRAME_FLAG (1ULL << 61)
	JavaInterpreted = 1 << 60   // #define JAVA_INTERPRETED (1ULL << 60)
	JavaPointerMask = 1<<47 - 1 // #define JAVA_POINTER_MASK ((1ULL << 47) - 1)
	HotSpotMaxHeaps = 4         // #define HS_MAX_HEAPS 4
	HotSpotNoField  = 0xffff    // #define HS_NO_FIELD 0xffff
)

// MaxTableRows is the largest table the unwinder's binary search covers.
//
//	#define UNWIND_SEARCH_STEPS 24
const MaxTableRows = 1 << 24

// Indexes of the per-CPU `counters` array.
const (
	CounterSamples           = 0  // #define COUNTER_SAMPLES 0
	CounterUserStackErrors   = 1  // #define COUNTER_USER_STACK_ERRORS 1
	CounterKernelStackErrors = 2  // #define COUNTER_KERNEL_STACK_ERRORS 2
	CounterCountsFull        = 3  // #define COUNTER_COUNTS_FULL 3
	CounterUnwindStacks      = 4  // #define COUNTER_UNWIND_STACKS 4
	CounterUnwindComplete    = 5  // #define COUNTER_UNWIND_COMPLETE 5
	CounterUnwindFPFrames    = 6  // #define COUNTER_UNWIND_FP_FRAMES 6
	CounterUnwindNoRow       = 7  // #define COUNTER_UNWIND_NO_ROW 7
	CounterUnwindUnsupported = 8  // #define COUNTER_UNWIND_UNSUPPORTED 8
	CounterUnwindSignal      = 9  // #define COUNTER_UNWIND_SIGNAL 9
	CounterUnwindRBPLost     = 10 // #define COUNTER_UNWIND_RBP_LOST 10
	CounterUnwindReadErrors  = 11 // #define COUNTER_UNWIND_READ_ERRORS 11
	CounterUnwindTruncated   = 12 // #define COUNTER_UNWIND_TRUNCATED 12
	CounterUnwindStacksFull  = 13 // #define COUNTER_UNWIND_STACKS_FULL 13
	CounterUnwindNoMapping   = 14 // #define COUNTER_UNWIND_NO_MAPPING 14
	CounterPythonStacks      = 15 // #define COUNTER_PYTHON_STACKS 15
	CounterPythonFrames      = 16 // #define COUNTER_PYTHON_FRAMES 16
	CounterPythonNoThread    = 17 // #define COUNTER_PYTHON_NO_THREAD 17
	CounterJSStacks          = 18 // #define COUNTER_JS_STACKS 18
	CounterJSFrames          = 19 // #define COUNTER_JS_FRAMES 19
	CounterJavaStacks        = 20 // #define COUNTER_JAVA_STACKS 20
	CounterJavaFrames        = 21 // #define COUNTER_JAVA_FRAMES 21
	CounterJavaNoBlob        = 22 // #define COUNTER_JAVA_NO_BLOB 22
	NumCounters              = 23 // #define COUNTER_MAX 23
)

// Rules of struct unwind_row, the values of unwind.Rule.
const (
	RuleNone        = 0 // #define RULE_NONE 0
	RuleRSP         = 1 // #define RULE_RSP 1
	RuleRBP         = 2 // #define RULE_RBP 2
	RulePLT         = 3 // #define RULE_PLT 3
	RuleEnd         = 4 // #define RULE_END 4
	RuleSignal      = 5 // #define RULE_SIGNAL 5
	RuleUnsupported = 6 // #define RULE_UNSUPPORTED 6
	RuleDeref       = 7 // #define RULE_DEREF 7
)

// x86-64: a RuleUnsupported row's CFA register, and where the walk knows it.
const (
	CFARegShift  = 3  // #define CFA_REG_SHIFT 3
	RegsTask     = 1  // #define REGS_TASK 1
	RegsSignal   = 2  // #define REGS_SIGNAL 2
	SigframeRegs = 40 // #define SIGFRAME_REGS 40
)

// The arm64 bits of struct unwind_row's rule (unwind/arm64.go).
const (
	RuleMask      = 7         // #define RULE_MASK 7
	RAMask        = 24        // #define RA_MASK 24
	RAInLR        = 0         // #define RA_IN_LR 0
	RAFrame       = 8         // #define RA_FRAME 8
	RASaved       = 16        // #define RA_SAVED 16
	RASavedFPLost = 24        // #define RA_SAVED_FP_LOST 24
	SlotFromReg   = 32        // #define SLOT_FROM_REG 32
	UserVAMask    = 1<<48 - 1 // #define USER_VA_MASK ((1ULL << 48) - 1)
	SigframeA64FP = 544       // #define SIGFRAME_A64_FP 544
	SigframeA64LR = 552       // #define SIGFRAME_A64_LR 552
	SigframeA64SP = 560       // #define SIGFRAME_A64_SP 560
	SigframeA64PC = 568       // #define SIGFRAME_A64_PC 568
)

// MappingPrefixBits is the LPM trie key's full prefix: 32 bits of pid and 64
// of address after the prefixlen field.
const MappingPrefixBits = 96

// Why a process is in unwind_refresh.
const (
	RefreshMiss        = 1 // #define REFRESH_MISS 1
	RefreshExec        = 2 // #define REFRESH_EXEC 2
	RefreshFork        = 3 // #define REFRESH_FORK 3
	RefreshSampled     = 4 // #define REFRESH_SAMPLED 4
	RefreshExecSampled = 5 // #define REFRESH_EXEC_SAMPLED 5
	RefreshCgroup      = 6 // #define REFRESH_CGROUP 6
)

// How long a process stays in unwind_ignored.
const (
	IgnoreUntilExec = 1 // #define IGNORE_UNTIL_EXEC 1
	IgnoreSticky    = 2 // #define IGNORE_STICKY 2
)

// Indexes of the per-CPU `offcpu_counters` array (offcpu.h).
const (
	OffCPUCounterRecorded    = 0 // #define OFFCPU_COUNTER_RECORDED 0
	OffCPUCounterBlocks      = 1 // #define OFFCPU_COUNTER_BLOCKS 1
	OffCPUCounterShort       = 2 // #define OFFCPU_COUNTER_SHORT 2
	OffCPUCounterStartsFull  = 3 // #define OFFCPU_COUNTER_STARTS_FULL 3
	OffCPUCounterCountsFull  = 4 // #define OFFCPU_COUNTER_COUNTS_FULL 4
	OffCPUCounterStackErrors = 5 // #define OFFCPU_COUNTER_STACK_ERRORS 5
	NumOffCPUCounters        = 6 // #define OFFCPU_COUNTER_MAX 6
)

// OffCPUThresholdOne is offcpu_threshold recording every switch-out: the
// program compares a random 32-bit number against it.
const OffCPUThresholdOne = 1 << 32

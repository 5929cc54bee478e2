package profiler

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestConstantsMatchC: every #define mirrored in constants.go has the value
// the C source gives it.
func TestConstantsMatchC(t *testing.T) {
	defines := map[string]int{}
	re := regexp.MustCompile(`(?m)^#define ([A-Z_0-9]+) \(?(-?[0-9]+)\)?`)
	for _, f := range []string{"profile.bpf.c", "unwind.h", "python.h", "v8.h", "hotspot.h", "offcpu.h"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			v, _ := strconv.Atoi(m[2])
			defines[m[1]] = v
		}
	}
	want := map[string]int{
		"MAX_STACK_DEPTH": MaxStackDepth, "UNWIND_MAX_FRAMES": MaxUnwindDepth,
		"COUNTER_SAMPLES": CounterSamples, "COUNTER_USER_STACK_ERRORS": CounterUserStackErrors,
		"COUNTER_KERNEL_STACK_ERRORS": CounterKernelStackErrors, "COUNTER_COUNTS_FULL": CounterCountsFull,
		"COUNTER_UNWIND_STACKS": CounterUnwindStacks, "COUNTER_UNWIND_COMPLETE": CounterUnwindComplete,
		"COUNTER_UNWIND_FP_FRAMES": CounterUnwindFPFrames, "COUNTER_UNWIND_NO_ROW": CounterUnwindNoRow,
		"COUNTER_UNWIND_UNSUPPORTED": CounterUnwindUnsupported, "COUNTER_UNWIND_SIGNAL": CounterUnwindSignal,
		"COUNTER_UNWIND_RBP_LOST": CounterUnwindRBPLost, "COUNTER_UNWIND_READ_ERRORS": CounterUnwindReadErrors,
		"COUNTER_UNWIND_TRUNCATED": CounterUnwindTruncated, "COUNTER_UNWIND_STACKS_FULL": CounterUnwindStacksFull,
		"COUNTER_UNWIND_NO_MAPPING": CounterUnwindNoMapping, "COUNTER_MAX": NumCounters,
		"COUNTER_PYTHON_STACKS": CounterPythonStacks, "COUNTER_PYTHON_FRAMES": CounterPythonFrames,
		"COUNTER_PYTHON_NO_THREAD": CounterPythonNoThread, "COUNTER_JS_STACKS": CounterJSStacks,
		"COUNTER_JS_FRAMES": CounterJSFrames, "COUNTER_JAVA_STACKS": CounterJavaStacks,
		"COUNTER_JAVA_FRAMES": CounterJavaFrames, "COUNTER_JAVA_NO_BLOB": CounterJavaNoBlob,
		"HS_MAX_HEAPS": HotSpotMaxHeaps, "PY_NO_OFFSET": PythonNoOffset,
		"PY_MAX_THREADS": PythonMaxThreads, "PY_INSTR_SHIFT": PythonInstrShift,
		"REFRESH_MISS": RefreshMiss, "REFRESH_EXEC": RefreshExec, "REFRESH_FORK": RefreshFork, "REFRESH_SAMPLED": RefreshSampled, "REFRESH_EXEC_SAMPLED": RefreshExecSampled, "REFRESH_CGROUP": RefreshCgroup,
		"IGNORE_UNTIL_EXEC": IgnoreUntilExec, "IGNORE_STICKY": IgnoreSticky,
		"RULE_NONE": RuleNone, "RULE_RSP": RuleRSP, "RULE_RBP": RuleRBP, "RULE_PLT": RulePLT,
		"OFFCPU_COUNTER_RECORDED": OffCPUCounterRecorded,
		"OFFCPU_COUNTER_BLOCKS":   OffCPUCounterBlocks, "OFFCPU_COUNTER_SHORT": OffCPUCounterShort,
		"OFFCPU_COUNTER_STARTS_FULL": OffCPUCounterStartsFull, "OFFCPU_COUNTER_COUNTS_FULL": OffCPUCounterCountsFull,
		"OFFCPU_COUNTER_STACK_ERRORS": OffCPUCounterStackErrors, "OFFCPU_COUNTER_MAX": NumOffCPUCounters,
		"RULE_END": RuleEnd, "RULE_SIGNAL": RuleSignal, "RULE_UNSUPPORTED": RuleUnsupported, "RULE_DEREF": RuleDeref,
		"CFA_REG_SHIFT": CFARegShift, "REGS_TASK": RegsTask, "REGS_SIGNAL": RegsSignal, "SIGFRAME_REGS": SigframeRegs,
		"RULE_MASK": RuleMask, "RA_MASK": RAMask, "RA_IN_LR": RAInLR, "RA_FRAME": RAFrame, "RA_SAVED": RASaved,
		"RA_SAVED_FP_LOST": RASavedFPLost, "SLOT_FROM_REG": SlotFromReg,
		"SIGFRAME_A64_FP": SigframeA64FP, "SIGFRAME_A64_LR": SigframeA64LR, "SIGFRAME_A64_SP": SigframeA64SP, "SIGFRAME_A64_PC": SigframeA64PC,
	}
	for name, v := range want {
		got, ok := defines[name]
		if !ok {
			t.Errorf("#define %s not found", name)
		} else if got != v {
			t.Errorf("#define %s %d, Go has %d", name, got, v)
		}
	}
	if PythonFrameFlag != 1<<63 || PythonInstrMax != 1<<18-1 || PythonCodeMask != 1<<PythonInstrShift-1 {
		t.Errorf("Python frame encoding: flag %#x, instr max %#x, code mask %#x", uint64(PythonFrameFlag), PythonInstrMax, PythonCodeMask)
	}
	if JSFrameFlag != 1<<62 || JSPointerMask != 1<<47-1 || JSFrameFlag&PythonFrameFlag != 0 {
		t.Errorf("JS frame encoding: flag %#x, pointer mask %#x", uint64(JSFrameFlag), uint64(JSPointerMask))
	}
	if JavaFrameFlag != 1<<61 || JavaInterpreted != 1<<60 || JavaPointerMask != 1<<47-1 || JavaFrameFlag&(JSFrameFlag|PythonFrameFlag) != 0 {
		t.Errorf("Java frame encoding: flag %#x, pointer mask %#x", uint64(JavaFrameFlag), uint64(JavaPointerMask))
	}
	if 1<<defines["UNWIND_SEARCH_STEPS"] != MaxTableRows {
		t.Errorf("UNWIND_SEARCH_STEPS %d, Go MaxTableRows %d", defines["UNWIND_SEARCH_STEPS"], MaxTableRows)
	}
}

// TestRegisterSlots: the nibble tables of unwind.h give each general
// register's slot in struct pt_regs and struct sigcontext (x86-64 UAPI
// field order), by DWARF number.
func TestRegisterSlots(t *testing.T) {
	b, err := os.ReadFile("unwind.h")
	if err != nil {
		t.Fatal(err)
	}
	dwarf := []string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"}
	for _, tc := range []struct {
		define string
		fields []string
	}{
		{"PT_REGS_SLOTS", []string{"r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx", "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss"}},
		{"SIGCONTEXT_SLOTS", []string{"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rdi", "rsi", "rbp", "rbx", "rdx", "rax", "rcx", "rsp", "rip"}},
	} {
		m := regexp.MustCompile(`(?m)^#define ` + tc.define + ` 0x([0-9a-f]+)ULL`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("#define %s not found", tc.define)
		}
		v, err := strconv.ParseUint(string(m[1]), 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		for n, name := range dwarf {
			if name == "rbp" || name == "rsp" {
				continue // their own rules
			}
			slot := -1
			for i, f := range tc.fields {
				if f == name {
					slot = i
				}
			}
			if got := int(v >> (4 * n) & 15); got != slot {
				t.Errorf("%s: %s (DWARF %d) in slot %d, want %d", tc.define, name, n, got, slot)
			}
		}
	}
	if !regexp.MustCompile(`(?m)^#define PT_REGS_RIP \(16 \* 8\)`).Match(b) {
		t.Errorf("PT_REGS_RIP is not rip's slot, 16")
	}
}

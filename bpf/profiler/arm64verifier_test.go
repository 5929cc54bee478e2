package profiler

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// TestArm64ObjectVerifies loads the arm64 object into this (x86-64)
// kernel: its verifier is the same code whatever the machine, so the arm64
// walk (arm64_step in unwind.h) and the rest of the program must pass it.
// Only perf_event's context differs: arm64's struct user_pt_regs is 272
// bytes, x86-64's 168, so the reads of pc, sp and pstate are out of this
// kernel's context; each one the verifier refuses is pointed at offset 0
// and the load tried again. Needs root (CI runs as root).
func TestArm64ObjectVerifies(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("loading BPF programs needs root")
		}
		t.Skip("loading BPF programs needs root")
	}
	spec, err := ebpf.LoadCollectionSpec("profile_arm64_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	prog := spec.Programs["profile_cpu"]
	if prog == nil || prog.Type != ebpf.PerfEvent {
		t.Fatalf("no perf_event program profile_cpu: %+v", prog)
	}
	ctxAccess := regexp.MustCompile(`(?m)^(\d+): \([0-9a-f]+\)[^\n]*\ninvalid bpf_context access off=(\d+) size=8`)
	patched := map[int]int{} // raw instruction offset: arm64 context offset
	for attempt := 0; attempt < 16; attempt++ {
		coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogSizeStart: 1 << 20}})
		if err == nil {
			coll.Close()
			if len(patched) == 0 {
				t.Fatal("loaded without patching a context read: is the object arm64's?")
			}
			t.Logf("the arm64 object passes the verifier; context reads pointed at offset 0: %v (insn: arm64 offset)", patched)
			return
		}
		var ve *ebpf.VerifierError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), "profile_cpu") {
			t.Fatalf("load: %v", err)
		}
		log := strings.Join(ve.Log, "\n")
		m := ctxAccess.FindAllStringSubmatch(log, -1)
		if len(m) == 0 {
			t.Fatalf("the verifier refuses the arm64 object for another reason than its context:\n%s", tail(log, 40))
		}
		at, _ := strconv.Atoi(m[len(m)-1][1])
		off, _ := strconv.Atoi(m[len(m)-1][2])
		if err := pointAtZero(prog.Instructions, at); err != nil {
			t.Fatalf("%v\n%s", err, tail(log, 20))
		}
		patched[at] = off
	}
	t.Fatalf("still refused after patching %d context reads", len(patched))
}

// pointAtZero makes the load at raw instruction offset at read offset 0.
func pointAtZero(insns asm.Instructions, at int) error {
	iter := insns.Iterate()
	for iter.Next() {
		if int(iter.Offset) == at {
			ins := iter.Ins
			if ins.OpCode.Class() != asm.LdXClass {
				return fmt.Errorf("instruction %d (%v) is not a load", at, *ins)
			}
			ins.Offset = 0
			return nil
		}
	}
	return fmt.Errorf("no instruction at %d", at)
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

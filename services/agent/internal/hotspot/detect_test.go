package hotspot

import (
	"os"
	"testing"
	"time"

	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

// TestDetect: the installed JDKs' tables read from a running JVM give the
// layouts measured on them (HotSpot 17: a virtual CodeBlob, the name tells
// nmethods; 25: CodeBlob::_kind and 16-bit offsets) and a code cache that
// holds the interpreter.
func TestDetect(t *testing.T) {
	for _, c := range []struct {
		name, home string
		need       bool
		want       Layout
	}{
		{"jdk17", workload.JDK17, true, Layout{HeapBlock: 16, BlobName: 96, BlobFrameSize: 28, BlobFrameComplete: 20, FrameCompleteBytes: 4,
			BlobCode: 32, BlobKind: 0xffff, NmethodMethod: 112, MethodConstMethod: 8, ConstMethodPool: 8, ConstMethodName: 34,
			ConstMethodSig: 36, PoolHolder: 24, PoolSourceFile: 54, PoolSize: 72, PoolLength: 60, KlassName: 24, SymbolLength: 4,
			SymbolBody: 6, InterpMethod: -24, InterpSenderSP: -8}},
		{"jdk25", workload.JDK25, false, Layout{HeapBlock: 8, BlobName: 8, BlobFrameSize: 44, BlobFrameComplete: 54, FrameCompleteBytes: 2,
			BlobCode: 36, CodeIsOffset: true, BlobKind: 56, NmethodKind: 1, NmethodMethod: 80, MethodConstMethod: 8, ConstMethodPool: 8,
			ConstMethodName: 36, ConstMethodSig: 38, PoolHolder: 24, PoolSourceFile: 54, PoolSize: 72, PoolLength: 60, KlassName: 24,
			SymbolLength: 4, SymbolBody: 6, InterpMethod: -24, InterpSenderSP: -8}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.home); err != nil && !c.need {
				t.Skipf("%s: %v", c.home, err)
			}
			// Two JVMs of one JDK: the second's tables come from the first's
			// reading, moved to where its libjvm.so is loaded.
			d := NewDetector(DefaultTableLimits)
			for i := range 2 {
				cmd := workload.JavaChain(t, c.home)
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { cmd.Process.Kill(); cmd.Wait() }()
				var p *Process
				var err error
				// Until the JVM has its code cache: ErrNotReady, or no libjvm.so yet.
				workload.WaitFor(10*time.Second, func() bool {
					p, err = d.Detect(proc.FS{Root: "/proc"}, cmd.Process.Pid, true)
					return err == nil
				})
				if err != nil {
					t.Fatalf("jvm %d: %v", i, err)
				}
				checkProcess(t, p, c.want)
			}
		})
	}
}

func checkProcess(t *testing.T, p *Process, want Layout) {
	t.Helper()
	if p.Layout != want {
		t.Errorf("layout\n%+v, want\n%+v", p.Layout, want)
	}
	if len(p.Heaps) != 3 || p.InterpStart < p.CodeStart || p.InterpEnd > p.CodeEnd || p.InterpEnd-p.InterpStart < 4096 {
		t.Errorf("code cache [%#x, %#x), heaps %+v, interpreter [%#x, %#x)", p.CodeStart, p.CodeEnd, p.Heaps, p.InterpStart, p.InterpEnd)
	}
	for _, h := range p.Heaps {
		if h.Low < p.CodeStart || h.High > p.CodeEnd {
			t.Errorf("heap %+v outside the code cache", h)
		}
	}
}

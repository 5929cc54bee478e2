package sdktest

import (
	"context"
	"debug/elf"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/ingest/internal/ingesttest"
)

type flameNode struct {
	Name     string       `json:"name"`
	Kind     string       `json:"kind"`
	Self     int64        `json:"self"`
	Children []*flameNode `json:"children"`
}

func (n *flameNode) walk(f func(*flameNode)) {
	f(n)
	for _, c := range n.Children {
		c.walk(f)
	}
}

// TestPipelineOTLP sends the eBPF-profiler-shaped request, built with the
// official pdata library, over gRPC to the real stackstream-ingest and
// follows it through the real symbolizer, indexer and query API: the
// flame graph of its service shows the Python and JavaScript frames named
// with their kinds and exactly the CPU time sent (events times the 50 ms
// period), the Ruby frame as jit, the native frame of a C binary named by
// the symbolizer from its build ID (a local debug directory), and the
// native frame of a binary whose symbols nobody has as an address.
func TestPipelineOTLP(t *testing.T) {
	native := buildNative(t)
	p := startPipeline(t, "STACKSTREAM_SYMBOLIZER_DEBUG_DIRS="+native.debugDir)
	now := time.Now()
	b, cpu := ingesttest.EBPFProfilerBuilder(now)
	// A native frame as the eBPF profiler reports it: an address in the
	// ELF's address space, on a mapping of the executable segment with the
	// GNU build ID; <module> of the Python stack calls it.
	m := b.Mapping("nativehot", native.buildID, native.segVaddr, native.segVaddr+native.segSize, native.segOffset)
	b.Sample(cpu, b.Stack(b.Frame("native", "", "", 0, m, native.funcAddr+4), b.Frame("cpython", "<module>", "/srv/app.py", 3, 0, 3)),
		nil, nil, 2, now.Add(-5*time.Second))
	pd := b.PD
	pd.ResourceProfiles().At(0).Resource().Attributes().PutStr("service.name", p.name)
	cc, err := grpc.NewClient(p.otlpGRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := pprofileotlp.NewGRPCClient(cc).Export(ctx, pprofileotlp.NewExportRequestFromProfiles(pd))
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	t.Logf("partial success: %d rejected (%s)", resp.PartialSuccess().RejectedProfiles(), resp.PartialSuccess().ErrorMessage())

	want := map[string]struct {
		kind string
		self int64
	}{
		"handle_request":         {"python", 3 * ingesttest.OTLPPeriodNs},
		"<module>":               {"python", 0},
		"render":                 {"js", 1 * ingesttest.OTLPPeriodNs},
		"Rack::Handler#call":     {"jit", 0},
		"stackstream_native_hot": {"", 2 * ingesttest.OTLPPeriodNs},
	}
	sel := url.QueryEscape(`{service="` + p.name + `"}`)
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var last string
	for {
		var fg struct {
			Total int64      `json:"total"`
			Root  *flameNode `json:"root"`
		}
		if getJSON("http://"+p.queryAddr+"/api/v1/flamegraph?type=cpu&from=now-15m&to=now&query="+sel, &fg) == nil && fg.Root != nil {
			found := map[string]*flameNode{}
			unresolved := ""
			fg.Root.walk(func(n *flameNode) {
				found[n.Name] = n
				if strings.HasPrefix(n.Name, "libpython3.12.so.1.0") {
					unresolved = n.Name + "/" + n.Kind
				}
			})
			ok := fg.Total == 6*ingesttest.OTLPPeriodNs && unresolved != "" && !strings.HasSuffix(unresolved, "/python")
			for name, w := range want {
				n := found[name]
				if n == nil || n.Kind != w.kind || n.Self != w.self {
					ok = false
				}
			}
			last = ""
			for name, n := range found {
				last += name + "(" + n.Kind + "," + time.Duration(n.Self).String() + ") "
			}
			if ok {
				t.Logf("flame graph of %s: total %s, %s", p.name, time.Duration(fg.Total), last)
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the flame graph of %s never showed the OTLP frames with their kinds and CPU time; last: %s", p.name, last)
		case <-time.After(time.Second):
		}
	}
}

// nativeBinary is a C program built for the test, laid out in a debug
// directory under its build ID, with what the eBPF profiler would report
// of it.
type nativeBinary struct {
	debugDir, buildID                      string
	segVaddr, segSize, segOffset, funcAddr uint64
}

func buildNative(t *testing.T) nativeBinary {
	dir := t.TempDir()
	src := filepath.Join(dir, "nativehot.c")
	if err := os.WriteFile(src, []byte("int stackstream_native_hot(int n) { int s = 0; for (int i = 0; i < n; i++) s += i * i; return s; }\nint main(void) { return stackstream_native_hot(3) == 5 ? 0 : 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "nativehot")
	testenv.Run(t, dir, nil, "gcc", "-O0", "-Wl,--build-id=sha1", "-o", exe, src)
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var nb nativeBinary
	note := f.Section(".note.gnu.build-id")
	if note == nil {
		t.Fatal("gcc wrote no GNU build ID")
	}
	data, err := note.Data()
	if err != nil || len(data) < 16 {
		t.Fatalf("build ID note: %v", err)
	}
	nb.buildID = hex.EncodeToString(data[16:])
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == "stackstream_native_hot" {
			nb.funcAddr = s.Value
		}
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_LOAD && prog.Flags&elf.PF_X != 0 {
			nb.segVaddr, nb.segSize, nb.segOffset = prog.Vaddr, prog.Memsz, prog.Off
		}
	}
	if nb.funcAddr == 0 || nb.segSize == 0 {
		t.Fatalf("no symbol or executable segment in %s", exe)
	}
	nb.debugDir = filepath.Join(dir, "debug")
	dst := filepath.Join(nb.debugDir, ".build-id", nb.buildID[:2], nb.buildID[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(exe, dst); err != nil {
		t.Fatal(err)
	}
	return nb
}

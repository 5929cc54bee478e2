package jfr

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stackstream/stackstream/pkg/testenv"
)

// TestParseJDKRecording: a recording the JDK's own Flight Recorder writes
// (not async-profiler: other metadata, its own constant pools, the JDK's
// allocation sampler) reads with the event counts the JDK's `jfr summary`
// gives for it, and the hot method's stack.
func TestParseJDKRecording(t *testing.T) {
	java, err := exec.LookPath("java")
	if err != nil {
		testenv.Unavailable(t, "java: %v", err)
	}
	jfrTool, err := exec.LookPath("jfr")
	if err != nil {
		testenv.Unavailable(t, "jfr (the JDK's tool): %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "Hot.java")
	os.WriteFile(src, []byte(`public class Hot {
    static volatile long sink;
    static long stackstreamHot(long n) {
        long s = 0;
        for (long i = 0; i < n; i++) { s += i * 31 ^ (s >>> 3); }
        return s;
    }
    public static void main(String[] args) {
        long end = System.currentTimeMillis() + 2000;
        while (System.currentTimeMillis() < end) { sink += stackstreamHot(2_000_000); sink += new byte[64 << 10].length; }
    }
}
`), 0o644)
	file := filepath.Join(dir, "rec.jfr")
	testenv.Run(t, dir, nil, java, "-XX:StartFlightRecording=filename="+file+",settings=profile", src)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(jfrTool, "summary", file).CombinedOutput()
	if err != nil {
		t.Fatalf("jfr summary: %v\n%s", err, out)
	}
	want := func(event string) int {
		m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(event) + `\s+(\d+)`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("jfr summary lists no %s:\n%s", event, out)
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	rec, err := Parse(data, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	k := kinds(rec)
	cpu, alloc := want("jdk.ExecutionSample"), want("jdk.ObjectAllocationSample")
	t.Logf("%d bytes: %d CPU and %d allocation samples (jfr summary: %d, %d)", len(data), k[CPU], k[Alloc], cpu, alloc)
	// A sample whose stack the recorder did not keep is not counted.
	if k[CPU] == 0 || k[CPU] > cpu || k[CPU] < cpu*9/10 || k[Alloc] > alloc || k[Alloc] < alloc*9/10 {
		t.Errorf("samples by kind = %v, want about jfr summary's %d CPU, %d allocation", k, cpu, alloc)
	}
	hot := false
	for _, s := range rec.Samples {
		if st := rec.Stacks[s.Stack]; s.Kind == CPU && st[0].Name == "Hot.stackstreamHot" && st[0].Line >= 4 && st[0].Line <= 6 {
			hot = true
		}
	}
	if !hot {
		t.Errorf("no CPU sample in Hot.stackstreamHot (lines 4-6)")
	}
}

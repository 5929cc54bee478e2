package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

// TestLabelsBounded runs a program whose executable path is longer than a
// label value may be and holds bytes that are not UTF-8: its labels are
// valid UTF-8 within the caps, and the service is still its base name.
func TestLabelsBounded(t *testing.T) {
	testenv.Root(t)
	dir := t.TempDir()
	deep := dir
	for len(deep) < 2*record.MaxLabelValueBytes {
		deep = filepath.Join(deep, strings.Repeat("d", 50)+"\xff")
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(deep, "longpath")
	built := workload.BuildC(t, dir, "longpath", false)
	if err := os.Rename(built, exe); err != nil {
		t.Fatal(err)
	}
	p := workload.Start(t, exe, 0)
	info, err := proc.FS{Root: "/proc"}.ReadInfo(p.PID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Executable != exe {
		t.Fatalf("executable %q, want %q", info.Executable, exe)
	}
	l := labelsOf(info)
	for k, v := range l {
		if len(v) > record.MaxLabelValueBytes || !utf8.ValidString(v) {
			t.Errorf("label %s: %d bytes, valid UTF-8 %v", k, len(v), utf8.ValidString(v))
		}
	}
	if l[record.LabelService] != "longpath" {
		t.Fatalf("service %q, want longpath", l[record.LabelService])
	}
}

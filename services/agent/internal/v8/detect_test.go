package v8

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestReadFileNode: the installed node's metadata is read and agrees with
// what the fixtures of this package assume (node20Values).
func TestReadFileNode(t *testing.T) {
	bin, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node not installed (Debian's nodejs package)")
		}
		t.Skip("node not installed")
	}
	bin, _ = filepath.EvalSymlinks(bin)
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	got, err := ReadFile(f, st.Size(), DefaultFileLimits)
	if err != nil {
		t.Fatal(err)
	}
	want := node20(t)
	t.Logf("%s: metadata %+v, embedded builtins [%#x, %#x)", bin, *got.Meta, got.CodeStart, got.CodeEnd)
	if *got.Meta != *want {
		t.Errorf("metadata of %s differs from node 20's:\n got %+v\nwant %+v", bin, *got.Meta, *want)
	}
	if got.CodeEnd <= got.CodeStart {
		t.Errorf("no embedded builtins found in %s's .symtab", bin)
	}
}

// TestReadFileLimits: symbol tables over the limit are refused, a file
// without v8dbg_ symbols is not V8.
func TestReadFileLimits(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	if _, err := ReadFile(f, st.Size(), DefaultFileLimits); err == nil {
		t.Errorf("the test binary has V8 metadata")
	}
	if _, err := ReadFile(f, 64, DefaultFileLimits); err == nil {
		t.Errorf("a truncated file was read")
	}
}

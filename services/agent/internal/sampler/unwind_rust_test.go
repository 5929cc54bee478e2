package sampler

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUnwindRustCrates: a cargo release build (testdata/rustcrates) whose hot
// leaf is in a crate from the registry (md5, no frame pointers, its own
// .eh_frame rows in the binary): every sample in the crate has md5 <-
// prog::digest <- prog::middle <- prog::main ... <- _start.
func TestUnwindRustCrates(t *testing.T) {
	if _, err := exec.LookPath("cargo"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cargo: %v", err)
		}
		t.Skipf("cargo: %v", err)
	}
	// Built in a copy: cargo writes its Cargo.lock next to the manifest. The
	// crate's version is pinned exactly in Cargo.toml (md5 has no dependencies).
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS("testdata/rustcrates")); err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	build := exec.Command("cargo", "build", "--release", "--manifest-path", filepath.Join(src, "Cargo.toml"), "--target-dir", target)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("cargo build: %v\n%s", err, out)
	}
	stacks, counts, c, stats := unwindRun(t, exec.Command(filepath.Join(target, "release", "prog")), 2*time.Second)
	share, depth, total := summarize(stacks, counts)
	t.Logf("%d samples, %.1f%% complete, median depth %d; counters %+v; registry %+v", total, 100*share, depth, c, stats)
	if total < 50 {
		t.Fatalf("only %d samples", total)
	}
	chain := []string{"prog:_ZN3md5", "prog:_ZN4prog6digest", "prog:_ZN4prog6middle", "prog:_ZN4prog4main"}
	var hot, exact uint64
	for i, st := range stacks {
		ok := complete(st)
		if len(st) > 0 && strings.HasPrefix(st[0], chain[0]) {
			hot += counts[i]
			ok = ok && inOrder(st, chain...)
		}
		if ok {
			exact += counts[i]
		} else if counts[i]*50 > total {
			t.Errorf("%d samples: %s", counts[i], strings.Join(st, " <- "))
		}
	}
	if exact*100 < total*99 {
		t.Errorf("%d of %d samples complete (with md5 <- digest <- middle <- main in the crate's)", exact, total)
	}
	if hot*2 < total {
		t.Errorf("%d of %d samples in md5", hot, total)
	}
}

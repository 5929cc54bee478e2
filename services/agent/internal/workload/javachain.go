package workload

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stackstream/stackstream/pkg/testenv"
)

// JavaChainMethods are the Java frames of JavaChain's hot stack, innermost
// first.
var JavaChainMethods = []string{"Chain.hotJavaMethod", "Chain.middle", "Chain.outer", "Chain.main"}

// javaChain: main -> outer -> middle -> hotJavaMethod, each call tens of
// milliseconds long, so the callers are called too rarely to be compiled
// (they stay interpreted) and hotJavaMethod's loop is compiled (C1, then
// C2, on stack) without being inlined into a caller.
const javaChain = `public class Chain {
    static long hotJavaMethod(long n) {
        long x = n;
        for (long i = 0; i < 30000000L; i++) { x = x * 6364136223846793005L + i; }
        return x;
    }
    static long middle(long n) { return hotJavaMethod(n) + 1; }
    static long outer(long n) { return middle(n) + 1; }
    public static void main(String[] args) {
        long s = 0;
        while (true) { s += outer(s); if (s == 42) System.out.println(s); }
    }
}
`

// JavaChain compiles Chain.java with the JDK at home into a directory of t
// and returns the command running it with flags (none: as deployed; -Xint:
// interpreted only), not started.
func JavaChain(t testing.TB, home string, flags ...string) *exec.Cmd {
	t.Helper()
	if _, err := os.Stat(filepath.Join(home, "bin", "javac")); err != nil {
		testenv.Unavailable(t, "JDK at %s: %v", home, err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Chain.java"), []byte(javaChain), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, dir, nil, filepath.Join(home, "bin", "javac"), "-d", dir, filepath.Join(dir, "Chain.java"))
	cmd := exec.Command(filepath.Join(home, "bin", "java"), append(append([]string{}, flags...), "-cp", dir, "Chain")...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd
}

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

// javaMix: a thread of its own ("worker") runs recursion (compiled frames
// calling compiled frames, some inlined) down to a loop of megamorphic
// interface calls (itable stubs; tiny leaf methods sampled in their
// prologues and epilogues), and a StringBuilder from the JDK.
const javaMix = `interface Op { long apply(long x); }
final class A implements Op { public long apply(long x) { return x * 3 + 1; } }
final class B implements Op { public long apply(long x) { return x ^ (x >>> 7); } }
final class C implements Op { public long apply(long x) { return x + 0x9e3779b97f4a7c15L; } }
public class Mix {
    static final Op[] OPS = { new A(), new B(), new C() };
    static long spin(long n) {
        long x = n;
        for (int i = 0; i < 2000; i++) { x = OPS[i % 3].apply(x); }
        return x;
    }
    static long rec(int d, long n) {
        if (d == 0) return spin(n);
        return rec(d - 1, n + d) * 31 + d;
    }
    public static void main(String[] args) throws Exception {
        Thread t = new Thread(() -> {
            long s = 0;
            while (true) {
                s += rec(12, s);
                StringBuilder sb = new StringBuilder();
                sb.append(s);
                if (sb.length() == 1) System.out.println(sb);
            }
        }, "worker");
        t.start();
        t.join();
    }
}
`

// JavaMix compiles Mix.java like JavaChain.
func JavaMix(t testing.TB, home string) *exec.Cmd {
	t.Helper()
	return javaProgram(t, home, "Mix", javaMix)
}

// javaNative: a loop calling a native method of the JDK
// (Runtime.availableProcessors, whose wrapper is an nmethod and whose C
// side reads the container limits), from main through outer and cpus.
const javaNative = `public class Nat {
    static long cpus(long n) {
        long s = n;
        for (int i = 0; i < 1000; i++) { s += Runtime.getRuntime().availableProcessors(); }
        return s;
    }
    static long outer(long n) { return cpus(n) + 1; }
    public static void main(String[] args) {
        long s = 0;
        while (true) { s += outer(s); if (s == 42) System.out.println(s); }
    }
}
`

// JavaNative compiles Nat.java like JavaChain.
func JavaNative(t testing.TB, home string) *exec.Cmd {
	t.Helper()
	return javaProgram(t, home, "Nat", javaNative)
}

// JavaChain compiles Chain.java with the JDK at home into a directory of t
// and returns the command running it with flags (none: as deployed; -Xint:
// interpreted only), not started.
func JavaChain(t testing.TB, home string, flags ...string) *exec.Cmd {
	t.Helper()
	return javaProgram(t, home, "Chain", javaChain, flags...)
}

func javaProgram(t testing.TB, home, class, source string, flags ...string) *exec.Cmd {
	t.Helper()
	if _, err := os.Stat(filepath.Join(home, "bin", "javac")); err != nil {
		testenv.Unavailable(t, "JDK at %s: %v", home, err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, class+".java")
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, dir, nil, filepath.Join(home, "bin", "javac"), "-d", dir, src)
	cmd := exec.Command(filepath.Join(home, "bin", "java"), append(append([]string{}, flags...), "-cp", dir, class)...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd
}

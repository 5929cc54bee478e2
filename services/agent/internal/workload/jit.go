package workload

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
)

// JIT workloads: a Java program and a node script that spin in a known
// function.
const (
	JavaHotMethod = "hotJavaMethod" // Hot.hotJavaMethod
	JSHotFunction = "hotJsFunction"
)

// JDKs on the test machines: Debian's default JDK 17 (required), and a
// Temurin 25 where present.
const (
	JDK17 = "/usr/lib/jvm/java-17-openjdk-amd64"
	JDK25 = "/usr/lib/jvm/temurin-25-jdk-amd64"
)

const javaSource = `public class Hot {
    static long hotJavaMethod(long n) {
        long x = n;
        for (long i = 0; i < 100000; i++) { x = x * 6364136223846793005L + i; }
        return x;
    }
    public static void main(String[] args) {
        long s = 0;
        while (true) { s += hotJavaMethod(s); if (s == 42) System.out.println(s); }
    }
}
`

const jsSource = `function hotJsFunction(n) {
  let x = n;
  for (let i = 0; i < 100000; i++) { x = (x * 31 + i) % 1000003; }
  return x;
}
let s = 0;
for (;;) { s += hotJsFunction(s); if (s === 42) console.log(s); }
`

// Nobody is the unprivileged user workloads run as when a test needs the
// agent to act with another user's credentials.
const Nobody = 65534

// StartJava compiles Hot.java with the JDK at home into a directory of t
// and runs it without any flag, as uid (0: the test's own user). It is
// killed when t ends.
func StartJava(t testing.TB, home string, uid uint32) *exec.Cmd {
	t.Helper()
	if _, err := os.Stat(filepath.Join(home, "bin", "javac")); err != nil {
		testenv.Unavailable(t, "JDK at %s: %v", home, err)
	}
	dir := t.TempDir()
	// Readable by the workload's user (t.TempDir makes both levels 0700).
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "Hot.java"), []byte(javaSource), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, dir, nil, filepath.Join(home, "bin", "javac"), "-d", dir, filepath.Join(dir, "Hot.java"))
	cmd := exec.Command(filepath.Join(home, "bin", "java"), "-cp", dir, "Hot")
	cmd.Dir = dir
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		cmd.Dir = "/"
	}
	return startKilled(t, cmd)
}

// StartNode runs the hot script with node and extra flags (--perf-basic-prof).
func StartNode(t testing.TB, flags ...string) *exec.Cmd {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Unavailable(t, "node: %v", err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "hot.js")
	if err := os.WriteFile(file, []byte(jsSource), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, append(flags, file)...)
	cmd.Dir = dir // V8 writes its isolate-*.log into the working directory
	return startKilled(t, cmd)
}

func startKilled(t testing.TB, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		// The runtimes' files in /tmp, named by PID.
		pid := cmd.Process.Pid
		for _, f := range []string{"/tmp/perf-%d.map", "/tmp/.java_pid%d", "/tmp/.attach_pid%d"} {
			os.Remove(fmt.Sprintf(f, pid))
		}
	})
	return cmd
}

// WaitFor polls cond every 100 ms until it holds or timeout passes.
func WaitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

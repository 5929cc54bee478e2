// Package testenv connects integration tests to the real Kafka, OpenSearch
// and kernel. Locally a missing service skips the test; with CI=true it fails.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// CI reports whether missing services must fail tests.
func CI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips t, or fails it under CI, because something it needs is missing.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if CI() {
		t.Fatalf("CI=true and a requirement is missing: "+format, args...)
	}
	t.Skipf("skipping: "+format, args...)
}

// KafkaBrokers returns the test broker (STACKSTREAM_TEST_KAFKA_BROKERS, default
// 127.0.0.1:9092) after checking it accepts connections.
func KafkaBrokers(t testing.TB) []string {
	t.Helper()
	addr := env("STACKSTREAM_TEST_KAFKA_BROKERS", "127.0.0.1:9092")
	brokers := strings.Split(addr, ",")
	c, err := net.DialTimeout("tcp", brokers[0], 3*time.Second)
	if err != nil {
		Unavailable(t, "Kafka at %s: %v (run make up)", addr, err)
	}
	c.Close()
	return brokers
}

// OpenSearchURL returns the test node (STACKSTREAM_TEST_OPENSEARCH_URL, default
// http://127.0.0.1:9200) after checking it answers.
func OpenSearchURL(t testing.TB) string {
	t.Helper()
	u := env("STACKSTREAM_TEST_OPENSEARCH_URL", "http://127.0.0.1:9200")
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(u)
	if err != nil {
		Unavailable(t, "OpenSearch at %s: %v (run make up)", u, err)
		return u
	}
	resp.Body.Close()
	return u
}

// Root requires root privileges (eBPF, perf events).
func Root(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "root privileges (run the tests as root)")
	}
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// Name returns a unique lowercase name for a topic, index or group of this
// test, so concurrent test runs against the shared services never collide.
func Name(t testing.TB, prefix string) string {
	base := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "-")
	if len(base) > 40 {
		base = base[:40]
	}
	b := make([]byte, 4)
	rand.Read(b)
	return strings.Trim(prefix+base, "-") + "-" + hex.EncodeToString(b)
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Run runs a command in dir with env added to the test's environment (a
// compiler building a test workload, say) and fails the test with its output
// when it fails.
func Run(t testing.TB, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

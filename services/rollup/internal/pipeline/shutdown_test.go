package pipeline

import (
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
)

// TestShutdownBoundedWhenWriteCannotFinish: OpenSearch goes away while the
// consumer holds unwritten windows, then it is stopped. Its final write
// cannot finish, so Run must give up after STACKSTREAM_ROLLUP_FLUSH_TIMEOUT
// and leaving the group must not try the write again (it used to, adding a
// second timeout: the fleet bench's SIGTERM waited past 40 s). Nothing
// unstored is committed, and the next instance writes every document exact.
func TestShutdownBoundedWhenWriteCannotFinish(t *testing.T) {
	e := newEnv(t, 1)
	e.flushTimeout = 8 * time.Second
	x := expected{}
	proxy := testenv.NewProxy(t, strings.TrimPrefix(e.osURL, "http://"))
	n := 0
	for at := time.Duration(0); at < 5*time.Minute; at += 10 * time.Second {
		for h, host := range []string{"web-1", "web-2"} {
			e.produce(record.ProfileCPU, host, x.cpuProfile(host, t0.Add(at+time.Duration(h)*time.Second), int64(at/time.Second)+1, int64(h)+1))
			n++
		}
	}
	in := e.start("http://" + proxy.Addr())
	waitFor(t, "every profile folded in", 60*time.Second, func() bool { return in.count("added") == n })
	committed := func() int64 {
		if o, ok := e.committed()[0]; ok && o.Err == nil {
			return o.At
		}
		return -1
	}
	before := committed()

	proxy.SetDown(true)
	start := time.Now()
	in.stop()
	var runErr error
	select {
	case runErr = <-in.done:
	case <-time.After(60 * time.Second):
		t.Fatal("run did not stop within 60 s")
	}
	in.cl.Close() // leaves the group: the revoke must not write again
	took := time.Since(start)
	in.once.Do(func() {}) // stopped here, not by the cleanup
	if runErr == nil {
		t.Fatal("run returned nil although its final write could not reach OpenSearch")
	}
	// A hang check, not a benchmark: one FlushTimeout and the group leave,
	// with 5 s of margin for a loaded machine; two timeouts (the bug: 16 s)
	// or an unbounded wait fail it.
	if took > e.flushTimeout+5*time.Second {
		t.Fatalf("stop took %s with FlushTimeout %s", took, e.flushTimeout)
	}
	t.Logf("stopped in %s (FlushTimeout %s): %v", took, e.flushTimeout, runErr)
	if got := committed(); got != before {
		t.Fatalf("committed %d after a final write that failed (was %d)", got, before)
	}

	proxy.SetDown(false)
	next := e.start(e.osURL)
	waitFor(t, "the next instance folds every record", 60*time.Second, func() bool { return next.count("added") == n })
	next.close(t)
	compare(t, byKey(e.docs()), x.finish())
}

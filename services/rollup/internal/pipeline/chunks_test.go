package pipeline

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/schemas/record"
)

// chunkWriter counts the documents the consumer holds built but not
// written at each write (aggregate.Partition.DocumentsBuilt less those
// written before), and fails every write once failAfter more have passed
// (with fail set).
type chunkWriter struct {
	w    Writer
	r    atomic.Pointer[Rollup] // nil until the test sets it
	fail atomic.Bool

	mu        sync.Mutex
	written   int64 // documents written
	writes    int
	mostHeld  int64 // documents held at a write, at most
	failAfter int
}

var errChunk = errors.New("test: chunk write refused")

// Write is called with r.mu held (flushes; no hour ends in these tests
// while counting), so reading r.parts is safe.
func (c *chunkWriter) Write(ctx context.Context, items []bulk.Item) ([]bulk.Rejected, error) {
	c.mu.Lock()
	if r := c.r.Load(); r != nil {
		var built int64
		for _, p := range r.parts {
			built += p.DocumentsBuilt()
		}
		c.mostHeld = max(c.mostHeld, built-c.written)
	}
	if c.fail.Load() {
		if c.failAfter == 0 {
			c.mu.Unlock()
			return nil, errChunk
		}
		c.failAfter--
	}
	c.writes++
	c.written += int64(len(items))
	c.mu.Unlock()
	return c.w.Write(ctx, items)
}

// TestFlushHoldsOneChunk (real Kafka and OpenSearch): 16 hosts for 14
// minutes, written in 4 KiB chunks. At no write does the consumer hold
// more than a chunk's documents (and one series' or tree's past it) built
// and not yet written, though its final flush writes the whole hour and
// 10-minute windows of every host; and every document is exact. Built all
// at once (as before: Partition.Pending in the flush), it held every
// document of a flush at its first write.
func TestFlushHoldsOneChunk(t *testing.T) {
	defer func(n int) { flushChunkBytes = n }(flushChunkBytes)
	flushChunkBytes = 4 << 10
	e := newEnv(t, 1)
	e.flushTimeout = time.Minute // the final flush, 4 KiB a request
	var cw *chunkWriter
	e.wrap = func(w Writer) Writer { cw = &chunkWriter{w: w}; return cw }
	x := expected{}
	var hosts []string
	for h := range 16 {
		hosts = append(hosts, "web-"+string(rune('a'+h)))
	}
	n := 0
	for k := range 28 { // 10:00 to 10:13:30, every 30 s
		for h, host := range hosts {
			e.produce(record.ProfileCPU, host, x.cpuProfile(host, t0.Add(time.Duration(k)*30*time.Second), int64(100*(h+1)+k), int64(3+k)))
			n++
		}
	}
	in := e.start(e.osURL)
	cw.r.Store(in.r)
	waitFor(t, "every record folded in", 60*time.Second, func() bool { return in.count("added") == n })
	in.close(t)
	compare(t, byKey(e.docs()), x.finish())

	// A chunk is about 4 KiB / 256 bytes = 16 documents (pendingBytes);
	// one series' documents past it are a stacks document, a tree and 4
	// function documents; the final flush alone writes over 300.
	const bound = 16 + 8
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if cw.mostHeld > bound || cw.written < 300 {
		t.Fatalf("%d documents held built and unwritten at a write, bound %d (%d written in %d writes)", cw.mostHeld, bound, cw.written, cw.writes)
	}
	t.Logf("%d documents written in %d writes, at most %d held", cw.written, cw.writes, cw.mostHeld)
}

// TestFailedChunkCommitsNothing (real Kafka and OpenSearch): the final
// flush's third chunk write fails. Run returns the error, the flush
// commits nothing (the group's offset stays where the hour 10:00's write
// left it), and the next instance, reading again from that commit, stores
// every document exact: nothing lost, nothing counted twice.
func TestFailedChunkCommitsNothing(t *testing.T) {
	defer func(n int) { flushChunkBytes = n }(flushChunkBytes)
	flushChunkBytes = 4 << 10
	e := newEnv(t, 1)
	e.flushTimeout = time.Minute
	var cw *chunkWriter
	e.wrap = func(w Writer) Writer { cw = &chunkWriter{w: w}; return cw }
	x := expected{}
	n, firstNext := boundaryFleet(e, x, []string{"web-1", "web-2"})

	in := e.start(e.osURL)
	committedAt := func() int64 {
		if o, ok := e.committed()[0]; ok && o.Err == nil {
			return o.At
		}
		return -1
	}
	waitFor(t, "every record folded in, the hour 10:00 stored and committed", 120*time.Second, func() bool {
		return in.count("added") == n && testutil.ToFloat64(in.r.m.hourWrites) == 0 && committedAt() >= firstNext
	})
	before := committedAt()
	cw.mu.Lock()
	cw.failAfter = 2
	cw.mu.Unlock()
	cw.fail.Store(true)
	in.stop()
	var runErr error
	select {
	case runErr = <-in.done:
	case <-time.After(120 * time.Second):
		t.Fatal("run did not stop within 120 s")
	}
	in.cl.Close()
	in.once.Do(func() {}) // stopped here, not by the cleanup
	if !errors.Is(runErr, errChunk) || !strings.Contains(runErr.Error(), "flush on shutdown") {
		t.Fatalf("run returned %v, want the failed chunk of the final flush", runErr)
	}
	if cw.failAfter != 0 {
		t.Fatalf("the final flush wrote %d chunks before it failed, want 2", 2-cw.failAfter)
	}
	if got := committedAt(); got != before {
		t.Fatalf("committed %d after the final flush failed, was %d", got, before)
	}

	e.wrap = nil
	next := e.start(e.osURL)
	waitFor(t, "the next instance folds the records after the commit", 90*time.Second, func() bool {
		return next.count("added") == n-int(before)
	})
	next.close(t)
	compare(t, byKey(e.docs()), x.finish())
}

package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// hourGate holds back every write of the hour 10:00's documents until it
// opens (the ended hour's write stays in flight as long as a test wants),
// and fails those writes after the first pass ones when fail is set.
type hourGate struct {
	w        Writer
	open     chan struct{} // closed to let hour writes through
	held     chan struct{} // closed when the first hour write arrives
	heldOnce sync.Once
	fail     bool
	pass     int // hour writes let through before failing, with fail

	mu     sync.Mutex
	passed int
	inside int // hour writes held now
	most   int // ... at most
}

var errGate = errors.New("test: hour write refused")

func newHourGate(w Writer) *hourGate {
	return &hourGate{w: w, open: make(chan struct{}), held: make(chan struct{})}
}

func (g *hourGate) Write(ctx context.Context, items []bulk.Item) ([]bulk.Rejected, error) {
	hour := []byte(fmt.Sprintf(`%q,"resolution":%q`, t0.Format(time.RFC3339Nano), indices.ResolutionHour))
	holdsHour := false
	for _, it := range items {
		if bytes.Contains(it.Doc, hour) {
			holdsHour = true
			break
		}
	}
	if holdsHour {
		g.heldOnce.Do(func() { close(g.held) })
		g.mu.Lock()
		g.inside++
		g.most = max(g.most, g.inside)
		g.mu.Unlock()
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		g.mu.Lock()
		g.inside--
		refuse := g.fail && g.passed >= g.pass
		g.passed++
		g.mu.Unlock()
		if refuse {
			return nil, errGate
		}
	}
	return g.w.Write(ctx, items)
}

// boundaryFleet produces a profile per host every 10 s from 10:50 to
// 11:04:50, and a late one of 10:59:55 per host among the 11:00 records
// (within allowed lateness: it changes the ended hour while it is being
// written). It returns how many records it produced and the offset of the
// first record of 11:00.
func boundaryFleet(e *env, x expected, hosts []string) (n int, firstNext int64) {
	firstNext = -1
	for k := range 90 {
		at := t0.Add(50*time.Minute + time.Duration(k)*10*time.Second)
		for h, host := range hosts {
			if at.Equal(t0.Add(time.Hour)) && firstNext < 0 {
				firstNext = int64(n)
			}
			e.produce(record.ProfileCPU, host, x.cpuProfile(host, at, int64(100*(h+1)+k), int64(3+k)))
			n++
		}
		if at.Equal(t0.Add(time.Hour + 30*time.Second)) {
			for h, host := range hosts {
				e.produce(record.ProfileCPU, host, x.cpuProfile(host, t0.Add(59*time.Minute+55*time.Second), int64(7+h), 1))
				n++
			}
		}
	}
	return n, firstNext
}

// TestNextHourFoldedWhileEndedHourWrites (real Kafka and OpenSearch): the
// write of the ended hour is held back; the records of the next hour, and
// late profiles of the ended one, are folded in meanwhile, nothing past
// the ended hour is committed, and once the write goes through every
// document is exact (the late profiles rewrite what they changed).
func TestNextHourFoldedWhileEndedHourWrites(t *testing.T) {
	// The hour written in many chunks, the late profiles folded in
	// between.
	defer func(n int) { flushChunkBytes = n }(flushChunkBytes)
	flushChunkBytes = 4 << 10
	e := newEnv(t, 1)
	e.flushTimeout = time.Minute // the stop waits for the hour in flight, 4 KiB a request
	var gate *hourGate
	e.wrap = func(w Writer) Writer { gate = newHourGate(w); return gate }
	x := expected{}
	n, _ := boundaryFleet(e, x, []string{"web-1", "web-2"})

	in := e.start(e.osURL)
	select {
	case <-gate.held:
	case <-time.After(60 * time.Second):
		t.Fatal("no hour write within 60 s")
	}
	waitFor(t, "every record folded in while the ended hour is written", 60*time.Second, func() bool { return in.count("added") == n })
	if got := testutil.ToFloat64(in.r.m.hourWrites); got != 1 {
		t.Fatalf("%v hour writes in flight, want 1", got)
	}
	if o, ok := e.committed()[0]; ok && o.Err == nil && o.At > 0 {
		t.Fatalf("committed offset %d while the hour from offset 0 is not stored", o.At)
	}
	close(gate.open)
	in.close(t)
	compare(t, byKey(e.docs()), x.finish())
}

// TestEndedHourWriteFailsThenRestart (real Kafka and OpenSearch): the
// ended hour's write fails part way while the next hour is folded in. Run
// returns the error, nothing past the hour is committed, and the next
// instance, reading again from the last commit, stores every document
// exact: nothing lost, nothing counted twice.
func TestEndedHourWriteFailsThenRestart(t *testing.T) {
	defer func(n int) { flushChunkBytes = n }(flushChunkBytes)
	flushChunkBytes = 4 << 10
	e := newEnv(t, 1)
	e.flushTimeout = time.Minute // the stop waits for the hour in flight, 4 KiB a request
	var gate *hourGate
	e.wrap = func(w Writer) Writer {
		gate = newHourGate(w)
		gate.fail, gate.pass = true, 1
		close(gate.open)
		return gate
	}
	x := expected{}
	n, _ := boundaryFleet(e, x, []string{"web-1", "web-2"})

	in := e.start(e.osURL)
	var runErr error
	select {
	case runErr = <-in.done:
	case <-time.After(120 * time.Second):
		t.Fatal("run did not return the failed hour write within 120 s")
	}
	in.cl.Close()
	in.once.Do(func() {}) // stopped here, not by the cleanup
	if !errors.Is(runErr, errGate) || !strings.Contains(runErr.Error(), "write hour") {
		t.Fatalf("run returned %v, want the failed hour write", runErr)
	}
	if o, ok := e.committed()[0]; ok && o.Err == nil && o.At > 0 {
		t.Fatalf("committed offset %d after the write of the hour from offset 0 failed", o.At)
	}

	e.wrap = nil
	next := e.start(e.osURL)
	waitFor(t, "the next instance folds every record and stores the hour", 90*time.Second, func() bool {
		return next.count("added") == n && testutil.ToFloat64(next.r.m.hourWrites) == 0
	})
	next.close(t)
	compare(t, byKey(e.docs()), x.finish())
}

// TestNextHourEndsWhileHourInFlight (real Kafka and OpenSearch): at most
// one hour per partition is in flight. While the write of 10:00 is held
// back, the record that ends 11:00 is the last folded in; the loop waits
// there, and once the writes go through both hours are exact.
func TestNextHourEndsWhileHourInFlight(t *testing.T) {
	e := newEnv(t, 1)
	e.flushTimeout = time.Minute // the stop waits for the hour in flight, 4 KiB a request
	var gate *hourGate
	e.wrap = func(w Writer) Writer { gate = newHourGate(w); return gate }
	x := expected{}
	n, endsNext := 0, -1
	for k := range 6 * 75 { // 10:50 to 12:04:50
		at := t0.Add(50*time.Minute + time.Duration(k)*10*time.Second)
		if at.Equal(t0.Add(2 * time.Hour)) {
			endsNext = n
		}
		e.produce(record.ProfileCPU, "web-1", x.cpuProfile("web-1", at, int64(100+k), 3))
		n++
	}

	in := e.start(e.osURL)
	waitFor(t, "the record that ends 11:00 folded in", 60*time.Second, func() bool { return in.count("added") == endsNext+1 })
	// Held back, the write cannot end: no record after it may be folded.
	time.Sleep(2 * time.Second)
	if got := in.count("added"); got != endsNext+1 {
		t.Fatalf("%d records folded in with the write of 10:00 held back, want %d (up to the one ending 11:00)", got, endsNext+1)
	}
	if got := testutil.ToFloat64(in.r.m.hourWrites); got != 1 {
		t.Fatalf("%v hour writes in flight, want 1", got)
	}
	close(gate.open)
	waitFor(t, "every record folded in", 60*time.Second, func() bool { return in.count("added") == n })
	in.close(t)
	compare(t, byKey(e.docs()), x.finish())
}

// TestOneHourWriteAtATime (real Kafka and OpenSearch): the hours of two
// partitions end together; while the first one's write is held back, the
// other waits its turn (both counted in flight) instead of holding its
// documents and requests at the same time, and both end exact.
func TestOneHourWriteAtATime(t *testing.T) {
	e := newEnv(t, 2)
	e.flushTimeout = time.Minute
	var gate *hourGate
	e.wrap = func(w Writer) Writer { gate = newHourGate(w); return gate }
	x := expected{}
	hosts := []string{"web-1", "web-2", "web-3", "web-4", "web-5", "web-6"}
	n, _ := boundaryFleet(e, x, hosts)
	in := e.start(e.osURL)
	select {
	case <-gate.held:
	case <-time.After(60 * time.Second):
		t.Fatal("no hour write within 60 s")
	}
	waitFor(t, "every record folded in while the ended hours are written", 60*time.Second, func() bool { return in.count("added") == n })
	waitFor(t, "both partitions' hours in flight", 30*time.Second, func() bool { return testutil.ToFloat64(in.r.m.hourWrites) == 2 })
	time.Sleep(2 * time.Second) // a second write, were it let through, reaches the gate
	gate.mu.Lock()
	most := gate.most
	gate.mu.Unlock()
	if most != 1 {
		t.Fatalf("%d hour writes at the writer at once, want 1", most)
	}
	close(gate.open)
	in.close(t)
	compare(t, byKey(e.docs()), x.finish())
}

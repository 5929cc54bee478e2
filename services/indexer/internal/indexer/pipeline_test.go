package indexer_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stackstream/stackstream/services/indexer/internal/indexer"
	"github.com/stackstream/stackstream/services/indexer/internal/indexertest"
)

// heldProxy is OpenSearch behind a proxy that holds the first bulk request
// until release is closed (or its client gives up) and lets every other
// request through; passed counts the bulk requests answered.
type heldProxy struct {
	URL     string
	bulks   atomic.Int32
	passed  atomic.Int32
	release chan struct{}
	once    sync.Once
}

func newHeldProxy(t *testing.T, osURL string) *heldProxy {
	t.Helper()
	target, err := url.Parse(osURL)
	if err != nil {
		t.Fatal(err)
	}
	h := &heldProxy{release: make(chan struct{})}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/_bulk") {
			proxy.ServeHTTP(w, r)
			return
		}
		if h.bulks.Add(1) == 1 {
			select {
			case <-h.release:
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, r)
		h.passed.Add(1)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(h.free)
	h.URL = srv.URL
	return h
}

func (h *heldProxy) free() { h.once.Do(func() { close(h.release) }) }

// pipelineBehindHeldBulk runs an indexer of up to 4 batches in flight
// behind a proxy holding its first bulk request, and feeds it the corpus a
// few records at a time, so that several later batches are written while
// the first is held. It returns once at least two later bulk requests were
// answered (stored) and checks that nothing was committed meanwhile.
func pipelineBehindHeldBulk(t *testing.T, e *indexertest.Env, recs []indexertest.Record, opts ...func(*indexer.Options)) (*running, *heldProxy) {
	t.Helper()
	h := newHeldProxy(t, e.URL)
	run := start(t, e, h.URL, append([]func(*indexer.Options){func(o *indexer.Options) { o.MaxInFlight = 4 }}, opts...)...)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (bulk requests %d, answered %d)", what, h.bulks.Load(), h.passed.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	e.Produce(t, recs[:1])
	waitFor("the first bulk request", func() bool { return h.bulks.Load() == 1 })
	// Three more batches (the flush interval is 200 ms), each written
	// while the first is held.
	rest := recs[1:]
	for i := range 3 {
		part := rest[i*len(rest)/3 : (i+1)*len(rest)/3]
		e.Produce(t, part)
		want := int32(i + 2)
		waitFor("a later bulk request", func() bool { return h.bulks.Load() >= want })
	}
	waitFor("two later bulk requests answered", func() bool { return h.passed.Load() >= 2 })
	if n := e.CountDocs(t, e.Names.SamplesPattern()); n == 0 {
		t.Fatal("no samples document stored by the later batches")
	}
	// The later batches are stored; their commits wait for the first.
	for range 10 {
		for p, off := range e.Committed(t) {
			if off > 0 {
				t.Fatalf("partition %d committed offset %d while the first batch was held: a later batch's commit passed it", p, off)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return run, h
}

// TestSlowBatchHoldsLaterCommits: with several batches in flight, a batch
// whose bulk request is slow holds back the commits of every later batch,
// though those are stored; once it is stored, everything is committed and
// the totals are exact.
func TestSlowBatchHoldsLaterCommits(t *testing.T) {
	e := setup(t, 2)
	recs, want, err := smallCorpus(8).Build()
	if err != nil {
		t.Fatal(err)
	}
	run, h := pipelineBehindHeldBulk(t, e, recs)
	h.free()
	e.WaitCaughtUp(t, time.Minute)
	run.stop(t)
	if err := e.ReadStored(t).Check(want); err != nil {
		t.Fatal(err)
	}
	if n, w := e.CountDocs(t, e.Names.Stacks()), int64(len(want.Value)); n != w {
		t.Fatalf("%d stacks documents, want %d", n, w)
	}
}

// TestFailedBatchHoldsLaterCommits is a crash mid-pipeline: the first
// batch's bulk request never ends, the indexer is stopped and its shutdown
// time-out passes, so that batch fails while later ones are stored. Nothing
// is committed; an indexer started afterwards on the same group reads every
// record again and the totals are exact, nothing lost and nothing counted
// twice (document IDs are deterministic).
func TestFailedBatchHoldsLaterCommits(t *testing.T) {
	e := setup(t, 2)
	recs, want, err := smallCorpus(8).Build()
	if err != nil {
		t.Fatal(err)
	}
	run, _ := pipelineBehindHeldBulk(t, e, recs, func(o *indexer.Options) { o.ShutdownTimeout = time.Second })
	run.cancel()
	run.cancel = nil
	select {
	case err := <-run.done:
		if err == nil {
			t.Fatal("Run returned nil with its first batch never stored")
		}
		t.Logf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("indexer did not stop within 30 s")
	}
	if c := e.Committed(t); len(c) != 0 {
		for p, off := range c {
			if off > 0 {
				t.Fatalf("partition %d committed offset %d after the first batch failed", p, off)
			}
		}
	}
	second := start(t, e, e.URL)
	e.WaitCaughtUp(t, time.Minute)
	second.stop(t)
	stored := e.ReadStored(t)
	if err := stored.Check(want); err != nil {
		t.Fatal(err)
	}
	if n, w := e.CountDocs(t, e.Names.Stacks()), int64(len(want.Value)); n != w {
		t.Fatalf("%d stacks documents, want %d", n, w)
	}
}

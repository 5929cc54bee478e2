package agent

import (
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/record"
)

var allocSink []byte

// allocHot allocates size bytes: large enough (8 times Go's 512 KiB sampling
// rate) that the heap profile records nearly every call at its true size.
//
//go:noinline
func allocHot(size int) {
	allocSink = make([]byte, size)
}

// TestAllocProfile scrapes this test process's own heap profile while
// allocHot allocates at a steady rate: the agent publishes `alloc` profiles of
// what was allocated between scrapes (not Go's counts since the process
// started), in which allocHot appears, and whose sum cannot exceed what was
// allocated.
func TestAllocProfile(t *testing.T) {
	e := newEnv(t)
	const size = 4 << 20
	var allocated atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				allocHot(size)
				allocated.Add(size)
			}
		}
	}()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { pprof.Lookup("heap").WriteTo(w, 0) }))
	defer srv.Close()

	a := start(t, e, Config{PIDs: []int{os.Getpid()}, HeapEndpoints: []string{"allocs=" + srv.URL}})
	time.Sleep(4500 * time.Millisecond)
	a.stop(t)
	close(stop)
	<-done
	got := consume(t, e)

	if len(got.heap) < 3 || len(got.alloc) < 2 {
		t.Fatalf("%d heap and %d alloc profiles, want at least 3 and 2 (the first scrape is the baseline)", len(got.heap), len(got.alloc))
	}
	var hot int64
	withHot := 0
	for _, p := range got.alloc {
		if len(p.SampleType) != 2 || p.SampleType[0].Type != "alloc_objects" || p.SampleType[1].Type != "alloc_space" || p.SampleType[1].Unit != "bytes" {
			t.Fatalf("alloc sample types %v, want alloc_objects, alloc_space (bytes)", p.SampleType)
		}
		var inProfile int64
		for _, s := range p.Sample {
			if s.Label[record.LabelService][0] != "allocs" {
				t.Fatalf("alloc sample labels %v, want service allocs", s.Label)
			}
			if s.Value[0] <= 0 || s.Value[1] <= 0 {
				t.Fatalf("alloc sample values %v: samples that allocated nothing are left out", s.Value)
			}
			for _, loc := range s.Location {
				for _, l := range loc.Line {
					if l.Function != nil && l.Function.Name == "github.com/stackstream/stackstream/services/agent/internal/agent.allocHot" {
						inProfile += s.Value[1]
						goto next
					}
				}
			}
		next:
		}
		if inProfile > 0 {
			withHot++
		}
		hot += inProfile
	}
	total := allocated.Load()
	t.Logf("%d alloc profiles, %d with allocHot; allocHot %d bytes in them, %d allocated in all", len(got.alloc), withHot, hot, total)
	if withHot < 2 {
		t.Fatalf("allocHot in %d alloc profiles, want at least 2", withHot)
	}
	// Counts since the process's start, published each interval, would sum
	// to several times what was allocated.
	if hot > total*5/4 {
		t.Fatalf("alloc profiles sum to %d bytes of allocHot, more than the %d it allocated: not deltas", hot, total)
	}
	if hot < total/4 {
		t.Fatalf("alloc profiles hold %d bytes of allocHot, under a quarter of the %d it allocated", hot, total)
	}
}

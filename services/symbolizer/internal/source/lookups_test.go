package source

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symbolize"
	"github.com/stackstream/stackstream/services/symbolizer/internal/testbin"
)

// countingTransport counts the requests a client sends and the most in
// flight at once.
type countingTransport struct {
	next                     http.RoundTripper
	mu                       sync.Mutex
	total, inFlight, maxSeen int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.total++
	c.inFlight++
	c.maxSeen = max(c.maxSeen, c.inFlight)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inFlight--
		c.mu.Unlock()
	}()
	return c.next.RoundTrip(r)
}

func (c *countingTransport) counts() (total, maxSeen int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total, c.maxSeen
}

// randomBuildIDs is a profile with one location in each of n mappings of
// random build IDs, as a hostile or broken agent could send.
func randomBuildIDs(n int) *profile.Profile {
	rng := rand.New(rand.NewPCG(7, 8))
	b := pproftest.NewCPU(time.Now(), time.Second)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%016x%016x%08x", rng.Uint64(), rng.Uint64(), rng.Uint32())
		base := uint64(0x10000000) * uint64(i+1)
		m := b.Mapping(base, base+0x10000, 0, fmt.Sprintf("/opt/x/lib%d.so", i), id)
		b.AddressSample(nil, []int64{1, 1}, m, base+0x1234)
	}
	return b.Profile()
}

func checkAddresses(t *testing.T, p *profile.Profile) {
	t.Helper()
	for _, l := range p.Location {
		if len(l.Line) != 1 || !strings.HasPrefix(l.Line[0].Function.Name, "lib") || !strings.Contains(l.Line[0].Function.Name, ".so+0x") {
			t.Fatalf("location %d: %+v, want binary+0xoffset", l.ID, l.Line)
		}
	}
}

// TestRandomBuildIDsSlowServer: a record names 3,000 random build IDs and
// the real debuginfod, asked for each, forwards to an upstream that never
// answers. The record gives up after its budget with every frame kept as
// an address, and no more fetches were started than the concurrency
// bound: the others waited for a slot and were never sent.
func TestRandomBuildIDsSlowServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var heldMu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			heldMu.Lock()
			held = append(held, c) // never answered
			heldMu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		heldMu.Lock()
		for _, c := range held {
			c.Close()
		}
		heldMu.Unlock()
	})
	url := testbin.DebuginfodEnv(t, t.TempDir(), []string{"DEBUGINFOD_URLS=http://" + ln.Addr().String()})

	d := NewDebuginfod([]string{url}, time.Minute)
	ct := &countingTransport{next: d.Client.Transport}
	d.Client.Transport = ct
	chain := NewChain(Options{MissTTL: time.Minute, MaxMisses: 100, LookupConcurrency: 4}, NewTopic(1<<20, nil), d)
	defer chain.Close()
	sym := &symbolize.Symbolizer{Tables: chain, Concurrency: 4, Budget: 2 * time.Second}
	p := randomBuildIDs(3000)
	st := sym.Profile(context.Background(), p)

	checkAddresses(t, p)
	cs := chain.Stats()
	total, maxSeen := ct.counts()
	t.Logf("fetches %d (peak %d running), requests %d (peak %d in flight), misses remembered %d, over budget %d", cs.Fetches, cs.PeakRunning, total, maxSeen, cs.Misses, st.OverBudget)
	if cs.Fetches > 4 || cs.PeakRunning > 4 || maxSeen > 4 || total > 4 || st.OverBudget != 1 {
		t.Fatalf("fetches %d, peak %d, requests %d, peak in flight %d, over budget %d: want at most 4 lookups while the server hangs",
			cs.Fetches, cs.PeakRunning, total, maxSeen, st.OverBudget)
	}
}

// TestRandomBuildIDsNotFound: the real debuginfod answers 404 for 2,000
// random build IDs. Each is asked for once (debuginfo, then executable),
// never more than 4 at a time, and the not-found cache keeps at most its
// bound.
func TestRandomBuildIDsNotFound(t *testing.T) {
	url := testbin.Debuginfod(t, t.TempDir())
	d := NewDebuginfod([]string{url}, time.Minute)
	ct := &countingTransport{next: d.Client.Transport}
	d.Client.Transport = ct
	chain := NewChain(Options{MissTTL: time.Minute, MaxMisses: 100, LookupConcurrency: 4}, NewTopic(1<<20, nil), d)
	defer chain.Close()
	sym := &symbolize.Symbolizer{Tables: chain, Concurrency: 4, Budget: 5 * time.Minute}
	p := randomBuildIDs(2000)
	sym.Profile(context.Background(), p)

	checkAddresses(t, p)
	cs := chain.Stats()
	total, maxSeen := ct.counts()
	t.Logf("fetches %d (peak %d running), requests %d (peak %d in flight), misses remembered %d", cs.Fetches, cs.PeakRunning, total, maxSeen, cs.Misses)
	if cs.Fetches != 2000 || total != 2*2000 || cs.PeakRunning > 4 || maxSeen > 4 || cs.Misses > 100 {
		t.Fatalf("fetches %d, requests %d, peak %d running, %d in flight, %d misses remembered", cs.Fetches, total, cs.PeakRunning, maxSeen, cs.Misses)
	}
}

// TestNoLookupPastBudget: once a record's (or its poll's) lookup time is
// up, its unknown build IDs start no fetch at all: a free slot does not
// tempt it.
func TestNoLookupPastBudget(t *testing.T) {
	src := &countingSource{}
	chain := NewChain(Options{MissTTL: time.Minute, LookupConcurrency: 4}, src)
	defer chain.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := randomBuildIDs(50)
	st := (&symbolize.Symbolizer{Tables: chain, Concurrency: 4}).Profile(ctx, p)
	checkAddresses(t, p)
	if n := chain.Stats().Fetches; n != 0 || src.calls != 0 || st.OverBudget != 1 {
		t.Fatalf("%d fetches, %d source calls, over budget %d: want none started", n, src.calls, st.OverBudget)
	}
}

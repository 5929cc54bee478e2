// Package source finds the debug information of a binary by build ID through
// a chain of sources (the debuginfo topic, local debug directories,
// debuginfod servers) and caches what it found, and what it did not.
package source

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/stackstream/stackstream/services/symbolizer/internal/symtab"
)

// ErrNotFound means a source has nothing for a build ID; the chain asks the
// next one.
var ErrNotFound = errors.New("debug info not found")

// Source is one place debug information may come from.
type Source interface {
	// Name labels metrics and logs: topic, local, debuginfod.
	Name() string
	// Fetch returns the table of buildID, or an error wrapping ErrNotFound.
	Fetch(ctx context.Context, buildID string) (*symtab.Table, error)
}

var buildIDPattern = regexp.MustCompile(`^[0-9a-f]{2,128}$`)

// ValidBuildID reports whether id is a lowercase hex build ID, the only form
// that is safe to put in a path or URL.
func ValidBuildID(id string) bool { return buildIDPattern.MatchString(id) }

// Metrics observes the chain; nil fields are ignored.
type Metrics struct {
	CacheHit   func()
	CacheMiss  func()
	FetchError func(source string)
}

// Chain asks its sources in order and keeps an LRU of tables plus a
// bounded list of build IDs none of them had, each forgotten after MissTTL.
// The tables' byte budget is checked when a table is added and whenever a
// held one is used again, since a table's lookup caches grow with every
// new address it resolves.
// At most LookupConcurrency fetches run at once; a fetch runs on its own
// (bounded by LookupTimeout), so a caller that stops waiting for it still
// gets its answer cached for the next one.
type Chain struct {
	sources   []Source
	max       int
	maxBytes  int
	missTTL   time.Duration
	maxMisses int
	timeout   time.Duration
	wait      func(ctx context.Context, since time.Time) bool
	now       func() time.Time
	log       *slog.Logger
	metrics   Metrics
	slots     chan struct{}
	base      context.Context
	stop      context.CancelFunc

	mu       sync.Mutex
	lru      *list.List // of *entry, most recent first
	byID     map[string]*list.Element
	bytes    int                      // sum of the entries' charged bytes
	misses   map[string]*list.Element // of *miss, in missList
	missList *list.List               // oldest first: all share one TTL
	inflight map[string]*call
	// fbInflight holds the fallback fetches running, by the table they
	// follow.
	fbInflight map[*symtab.Table]*call
	// fallbacks holds, for a cached table, the table of the same build ID
	// from a later source (nil: none has it), fetched on a first miss.
	fallbacks map[*symtab.Table]*symtab.Table
	fetches   int // fetches started, for tests and metrics
	running   int
	peak      int // most fetches running at once
}

// entry is a table the chain holds, with the bytes it (and the fallback
// tables behind it) held when last counted.
type entry struct {
	tab     *symtab.Table
	charged int
}

type miss struct {
	id    string
	until time.Time
}

type call struct {
	done chan struct{}
	tab  *symtab.Table
}

// Options configure a Chain.
type Options struct {
	MaxTables int // tables kept in memory
	// MaxTableBytes bounds the estimated memory of the tables kept
	// (symtab.Table.Bytes); 0 means no bound but MaxTables.
	MaxTableBytes int
	MissTTL       time.Duration // how long "nobody has it" is believed
	// MaxMisses bounds the build IDs remembered as missing (oldest go
	// first); 0 means 65,536.
	MaxMisses int
	// LookupConcurrency bounds the fetches running at once; 0 means 4.
	LookupConcurrency int
	// LookupTimeout bounds one fetch through every source; 0 means 2m.
	LookupTimeout time.Duration
	// WaitDebuginfo, when set, is called after every source missed a
	// build ID: it waits (bounded by ctx) until the debuginfo topic has
	// been read up to its end as of since, and reports whether it was;
	// the first source is then asked again. A profile can arrive just
	// before the follower reads the value the agent published for it.
	WaitDebuginfo func(ctx context.Context, since time.Time) bool
	Now           func() time.Time
	Log           *slog.Logger
	Metrics       Metrics
}

// NewChain builds a chain over sources, asked in the given order.
func NewChain(opts Options, sources ...Source) *Chain {
	if opts.MaxTables <= 0 {
		opts.MaxTables = 256
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.MaxMisses <= 0 {
		opts.MaxMisses = 1 << 16
	}
	if opts.LookupConcurrency <= 0 {
		opts.LookupConcurrency = 4
	}
	if opts.LookupTimeout <= 0 {
		opts.LookupTimeout = 2 * time.Minute
	}
	base, stop := context.WithCancel(context.Background())
	return &Chain{
		sources: sources, max: opts.MaxTables, maxBytes: opts.MaxTableBytes, missTTL: opts.MissTTL, maxMisses: opts.MaxMisses,
		timeout: opts.LookupTimeout, wait: opts.WaitDebuginfo, now: opts.Now, log: opts.Log, metrics: opts.Metrics,
		slots: make(chan struct{}, opts.LookupConcurrency), base: base, stop: stop,
		lru: list.New(), byID: map[string]*list.Element{}, misses: map[string]*list.Element{}, missList: list.New(),
		inflight: map[string]*call{}, fbInflight: map[*symtab.Table]*call{}, fallbacks: map[*symtab.Table]*symtab.Table{},
	}
}

// Close cancels the fetches still running.
func (c *Chain) Close() { c.stop() }

// LookupStats are the chain's counts of fetches and misses.
type LookupStats struct {
	Fetches     int // fetches started
	PeakRunning int // most fetches running at once
	Misses      int // build IDs remembered as missing
	Tables      int // tables held (not counting fallbacks)
}

// Stats returns the chain's counts.
func (c *Chain) Stats() LookupStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return LookupStats{Fetches: c.fetches, PeakRunning: c.peak, Misses: len(c.misses), Tables: c.lru.Len()}
}

// cached answers from the cache, under c.mu: the table, or done with a
// nil table for a remembered miss.
func (c *Chain) cached(buildID string) (tab *symtab.Table, done bool) {
	if el, ok := c.byID[buildID]; ok {
		c.lru.MoveToFront(el)
		e := el.Value.(*entry)
		c.charge(e)
		return e.tab, true
	}
	if el, ok := c.misses[buildID]; ok {
		if c.now().Before(el.Value.(*miss).until) {
			return nil, true
		}
		c.missList.Remove(el)
		delete(c.misses, buildID)
	}
	return nil, false
}

// remember notes buildID as missing, under c.mu, dropping expired and, past
// MaxMisses, the oldest entries.
func (c *Chain) remember(buildID string) {
	if el, ok := c.misses[buildID]; ok {
		c.missList.Remove(el)
	}
	now := c.now()
	c.misses[buildID] = c.missList.PushBack(&miss{id: buildID, until: now.Add(c.missTTL)})
	for c.missList.Len() > 0 {
		front := c.missList.Front().Value.(*miss)
		if c.missList.Len() <= c.maxMisses && now.Before(front.until) {
			break
		}
		c.missList.Remove(c.missList.Front())
		delete(c.misses, front.id)
	}
}

// Table returns the table of buildID, or nil when no source has it or ctx
// ended first. Concurrent callers for one build ID share one fetch, which
// goes on after ctx ends, so its answer is cached for the next caller.
func (c *Chain) Table(ctx context.Context, buildID string) *symtab.Table {
	c.mu.Lock()
	if tab, done := c.cached(buildID); done {
		c.mu.Unlock()
		c.count(c.metrics.CacheHit)
		return tab
	}
	cl, ok := c.inflight[buildID]
	c.mu.Unlock()
	if !ok {
		c.count(c.metrics.CacheMiss)
		if !ValidBuildID(buildID) {
			return nil
		}
		// A slot first: a record naming thousands of unknown build IDs
		// waits here, within its own time budget, not in the sources.
		if !c.takeSlot(ctx) {
			return nil
		}
		c.mu.Lock()
		if tab, done := c.cached(buildID); done {
			c.mu.Unlock()
			<-c.slots
			return tab
		}
		if cl, ok = c.inflight[buildID]; !ok {
			cl = &call{done: make(chan struct{})}
			c.inflight[buildID] = cl
			c.started()
			// The follower compares this with its own clock: real time.
			go c.run(buildID, cl, time.Now())
		} else {
			<-c.slots
		}
		c.mu.Unlock()
	}
	select {
	case <-cl.done:
		return cl.tab
	case <-ctx.Done():
		return nil
	}
}

// takeSlot waits for a fetch slot within the caller's time; false when ctx
// ended first.
func (c *Chain) takeSlot(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false // a select would take a slot half the time
	}
	select {
	case c.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// started counts a fetch about to run in the slot its caller took; c.mu is held.
func (c *Chain) started() {
	c.fetches++
	c.running++
	c.peak = max(c.peak, c.running)
}

// Cached answers from the cache alone: the table of buildID (nil for a
// remembered miss) and true, or false when only a fetch can tell.
func (c *Chain) Cached(buildID string) (*symtab.Table, bool) {
	c.mu.Lock()
	tab, done := c.cached(buildID)
	c.mu.Unlock()
	if done {
		c.count(c.metrics.CacheHit)
	}
	return tab, done
}

// run fetches buildID in a slot, caches the answer and hands it to the
// callers waiting on cl.
func (c *Chain) run(buildID string, cl *call, missed time.Time) {
	ctx, cancel := context.WithTimeout(c.base, c.timeout)
	defer cancel()
	tab := c.fetch(ctx, buildID)
	if tab == nil && c.wait != nil && len(c.sources) > 0 && c.base.Err() == nil {
		// Asked again only once the debuginfo topic has been read to its
		// end as of the miss: a miss that was not a race is not repeated.
		if c.wait(ctx, missed) {
			tab = c.fetchFrom(ctx, buildID, 0, 1)
		}
	}
	c.mu.Lock()
	delete(c.inflight, buildID)
	c.running--
	if tab != nil {
		e := &entry{tab: tab}
		c.byID[buildID] = c.lru.PushFront(e)
		c.charge(e)
	} else if c.base.Err() == nil {
		c.remember(buildID)
	}
	c.mu.Unlock()
	<-c.slots
	cl.tab = tab
	close(cl.done)
}

// Fallback returns the table of the same build ID from the first source
// after the one that made after, or nil. The symbolizer asks for it when
// after cannot resolve an address: symbols-only values on the debuginfo
// topic (dynamic symbols of a shared library) then still get lines and
// local functions from /usr/lib/debug or debuginfod. Answers are cached with
// the table they follow.
func (c *Chain) Fallback(ctx context.Context, after *symtab.Table) *symtab.Table {
	c.mu.Lock()
	if fb, ok := c.fallbacks[after]; ok {
		c.mu.Unlock()
		return fb
	}
	cl, ok := c.fbInflight[after]
	c.mu.Unlock()
	if !ok {
		// Like Table: a slot within the caller's time, then a fetch of its
		// own, so its answer is kept even when the caller stopped waiting.
		if !c.takeSlot(ctx) {
			return nil
		}
		c.mu.Lock()
		if fb, done := c.fallbacks[after]; done {
			c.mu.Unlock()
			<-c.slots
			return fb
		}
		if cl, ok = c.fbInflight[after]; !ok {
			cl = &call{done: make(chan struct{})}
			c.fbInflight[after] = cl
			c.started()
			go c.runFallback(after, cl)
		} else {
			<-c.slots
		}
		c.mu.Unlock()
	}
	select {
	case <-cl.done:
		return cl.tab
	case <-ctx.Done():
		return nil
	}
}

// runFallback fetches the table of after's build ID from the sources after
// after's, in a slot, and keeps it with after.
func (c *Chain) runFallback(after *symtab.Table, cl *call) {
	ctx, cancel := context.WithTimeout(c.base, c.timeout)
	defer cancel()
	next := len(c.sources)
	for i, s := range c.sources {
		if s.Name() == after.Source {
			next = i + 1
			break
		}
	}
	fb := c.fetchFrom(ctx, after.BuildID, next, len(c.sources))
	c.mu.Lock()
	delete(c.fbInflight, after)
	c.running--
	// Kept only with a table the chain still holds: an evicted one would
	// stay in memory as this map's key.
	if c.base.Err() == nil && c.holds(after) {
		c.fallbacks[after] = fb
		if fb != nil {
			c.charge(c.byID[after.BuildID].Value.(*entry))
		}
	}
	c.mu.Unlock()
	<-c.slots
	cl.tab = fb
	close(cl.done)
}

// holds reports whether tab is a table the chain keeps, or a fallback
// behind one, under c.mu.
func (c *Chain) holds(tab *symtab.Table) bool {
	el, ok := c.byID[tab.BuildID]
	if !ok {
		return false
	}
	for t, hops := el.Value.(*entry).tab, 0; t != nil && hops < 8; t, hops = c.fallbacks[t], hops+1 {
		if t == tab {
			return true
		}
	}
	return false
}

// charge counts what e holds now, under c.mu, and evicts past the budget.
// A table's growth is counted when it is next used or evicted: the bytes
// held exceed MaxTableBytes by at most what the tables in use grew since.
func (c *Chain) charge(e *entry) {
	n := c.held(e.tab)
	c.bytes += n - e.charged
	e.charged = n
	c.evict()
}

// evict drops the least recently used tables while there are more than
// MaxTables or they hold more than MaxTableBytes; the newest always stays.
func (c *Chain) evict() {
	for c.lru.Len() > 1 && (c.lru.Len() > c.max || (c.maxBytes > 0 && c.bytes > c.maxBytes)) {
		old := c.lru.Remove(c.lru.Back()).(*entry)
		delete(c.byID, old.tab.BuildID)
		c.bytes -= old.charged
		c.dropFallbacks(old.tab)
	}
}

// held is what tab holds with the fallback tables behind it.
func (c *Chain) held(tab *symtab.Table) int {
	n := 0
	for hops := 0; tab != nil && hops < 8; hops++ {
		n += tab.Bytes()
		tab = c.fallbacks[tab]
	}
	return n
}

// TableBytes is the estimated memory of the tables the chain holds, as
// they are now (growth not yet charged included).
func (c *Chain) TableBytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for el := c.lru.Front(); el != nil; el = el.Next() {
		n += c.held(el.Value.(*entry).tab)
	}
	return n
}

// dropFallbacks forgets the chain of fallback tables behind tab.
func (c *Chain) dropFallbacks(tab *symtab.Table) {
	for tab != nil {
		next := c.fallbacks[tab]
		delete(c.fallbacks, tab)
		tab = next
	}
}

func (c *Chain) fetch(ctx context.Context, buildID string) *symtab.Table {
	return c.fetchFrom(ctx, buildID, 0, len(c.sources))
}

// fetchFrom asks sources[first:end] in order.
func (c *Chain) fetchFrom(ctx context.Context, buildID string, first, end int) *symtab.Table {
	if !ValidBuildID(buildID) || first >= end {
		return nil
	}
	for _, s := range c.sources[first:end] {
		tab, err := s.Fetch(ctx, buildID)
		if err == nil {
			tab.BuildID, tab.Source = buildID, s.Name()
			if tab.Skipped != nil {
				c.log.Warn("debug info read in part", "source", s.Name(), "build_id", buildID, "err", tab.Skipped)
			}
			return tab
		}
		if !errors.Is(err, ErrNotFound) {
			c.log.Warn("fetch debug info", "source", s.Name(), "build_id", buildID, "err", err)
			if c.metrics.FetchError != nil {
				c.metrics.FetchError(s.Name())
			}
		}
	}
	return nil
}

// Forget drops what the chain knows of buildID, found or missing, so the
// next lookup asks the sources again (new debug info has arrived).
func (c *Chain) Forget(buildID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.misses[buildID]; ok {
		c.missList.Remove(el)
		delete(c.misses, buildID)
	}
	if el, ok := c.byID[buildID]; ok {
		c.lru.Remove(el)
		delete(c.byID, buildID)
		e := el.Value.(*entry)
		c.bytes -= e.charged
		c.dropFallbacks(e.tab)
	}
}

func (c *Chain) count(f func()) {
	if f != nil {
		f()
	}
}

// notFound wraps ErrNotFound with what was looked for.
func notFound(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNotFound, fmt.Sprintf(format, args...))
}

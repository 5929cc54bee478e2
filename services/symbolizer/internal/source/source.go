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

// Chain asks its sources in order and keeps an LRU of tables plus a list of
// build IDs none of them had, each forgotten after MissTTL.
type Chain struct {
	sources  []Source
	max      int
	missTTL  time.Duration
	now      func() time.Time
	log      *slog.Logger
	metrics  Metrics
	mu       sync.Mutex
	lru      *list.List // of *symtab.Table, most recent first
	byID     map[string]*list.Element
	misses   map[string]time.Time // build ID -> when to try again
	inflight map[string]*call
	// fallbacks holds, for a cached table, the table of the same build ID
	// from a later source (nil: none has it), fetched on a first miss.
	fallbacks map[*symtab.Table]*symtab.Table
}

type call struct {
	done chan struct{}
	tab  *symtab.Table
}

// Options configure a Chain.
type Options struct {
	MaxTables int           // tables kept in memory
	MissTTL   time.Duration // how long "nobody has it" is believed
	Now       func() time.Time
	Log       *slog.Logger
	Metrics   Metrics
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
	return &Chain{
		sources: sources, max: opts.MaxTables, missTTL: opts.MissTTL, now: opts.Now, log: opts.Log, metrics: opts.Metrics,
		lru: list.New(), byID: map[string]*list.Element{}, misses: map[string]time.Time{}, inflight: map[string]*call{},
		fallbacks: map[*symtab.Table]*symtab.Table{},
	}
}

// Table returns the table of buildID, or nil when no source has it.
// Concurrent callers for one build ID share one fetch.
func (c *Chain) Table(ctx context.Context, buildID string) *symtab.Table {
	c.mu.Lock()
	if el, ok := c.byID[buildID]; ok {
		c.lru.MoveToFront(el)
		c.mu.Unlock()
		c.count(c.metrics.CacheHit)
		return el.Value.(*symtab.Table)
	}
	if until, ok := c.misses[buildID]; ok {
		if c.now().Before(until) {
			c.mu.Unlock()
			c.count(c.metrics.CacheHit)
			return nil
		}
		delete(c.misses, buildID)
	}
	if cl, ok := c.inflight[buildID]; ok {
		c.mu.Unlock()
		select {
		case <-cl.done:
		case <-ctx.Done():
			return nil
		}
		return cl.tab
	}
	cl := &call{done: make(chan struct{})}
	c.inflight[buildID] = cl
	c.mu.Unlock()
	c.count(c.metrics.CacheMiss)

	tab := c.fetch(ctx, buildID)

	c.mu.Lock()
	delete(c.inflight, buildID)
	if tab != nil {
		c.byID[buildID] = c.lru.PushFront(tab)
		for c.lru.Len() > c.max {
			old := c.lru.Remove(c.lru.Back()).(*symtab.Table)
			delete(c.byID, old.BuildID)
			c.dropFallbacks(old)
		}
	} else if ctx.Err() == nil {
		c.misses[buildID] = c.now().Add(c.missTTL)
	}
	c.mu.Unlock()
	cl.tab = tab
	close(cl.done)
	return tab
}

// Fallback returns the table of the same build ID from the first source
// after the one that made after, or nil. The symbolizer asks for it when
// after cannot resolve an address: symbols-only values on the debuginfo
// topic (dynamic symbols of a shared library) then still get lines and
// local functions from /usr/lib/debug or debuginfod. Answers are cached with
// the table they follow.
func (c *Chain) Fallback(ctx context.Context, after *symtab.Table) *symtab.Table {
	c.mu.Lock()
	fb, ok := c.fallbacks[after]
	c.mu.Unlock()
	if ok {
		return fb
	}
	next := len(c.sources)
	for i, s := range c.sources {
		if s.Name() == after.Source {
			next = i + 1
			break
		}
	}
	fb = c.fetchFrom(ctx, after.BuildID, next)
	if ctx.Err() != nil {
		return fb
	}
	c.mu.Lock()
	c.fallbacks[after] = fb
	c.mu.Unlock()
	return fb
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
	return c.fetchFrom(ctx, buildID, 0)
}

func (c *Chain) fetchFrom(ctx context.Context, buildID string, first int) *symtab.Table {
	if !ValidBuildID(buildID) || first >= len(c.sources) {
		return nil
	}
	for _, s := range c.sources[first:] {
		tab, err := s.Fetch(ctx, buildID)
		if err == nil {
			tab.BuildID, tab.Source = buildID, s.Name()
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
	delete(c.misses, buildID)
	if el, ok := c.byID[buildID]; ok {
		c.lru.Remove(el)
		delete(c.byID, buildID)
		c.dropFallbacks(el.Value.(*symtab.Table))
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

package source

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symtab"
)

// Topic is the debuginfo topic as a source: the latest value of every build
// ID, kept compressed in memory up to a byte budget (least recently used
// values go first; a dropped value falls through to the next source until
// the next restart reads the topic again).
type Topic struct {
	maxBytes int
	onChange func(buildID string)

	mu    sync.Mutex
	bytes int
	lru   *list.List // of *topicValue, most recent first
	byID  map[string]*list.Element
}

type topicValue struct {
	buildID string
	kind    debuginfo.Kind
	value   []byte // encoded KindSymbols value; nil for markers
	symbols int    // symbols and lines of the value: how rich it is
	lines   int
}

// bytes is what v holds in memory: markers count too, so a flood of them
// is bounded like values. The value's capacity, not its length: the copy
// takes a whole size class, which was up to 10% more heap than charged
// (TestTopicBytesCoverHeap).
func (v *topicValue) bytes() int { return cap(v.value) + len(v.buildID) + entryOverhead }

// entryOverhead is the bookkeeping of one build ID held (list element, map
// entry, struct, key): about 190 bytes measured, charged with a margin.
const entryOverhead = 224

// ErrNotRicher means a debuginfo value would replace one with more symbols
// (or a marker, or a tombstone, would replace symbols): anyone who can write
// the topic could otherwise blank a binary's symbols fleet-wide.
var ErrNotRicher = errors.New("debuginfo value has fewer symbols than the one held")

// NewTopic returns an empty store. onChange is called (outside the lock)
// when a build ID's value changes, so cached answers can be dropped.
func NewTopic(maxBytes int, onChange func(buildID string)) *Topic {
	return &Topic{maxBytes: maxBytes, onChange: onChange, lru: list.New(), byID: map[string]*list.Element{}}
}

// Name implements Source.
func (*Topic) Name() string { return "topic" }

// Fetch implements Source. Markers (too large, no symbols) count as not
// found, so the chain tries local debug dirs and debuginfod.
func (t *Topic) Fetch(_ context.Context, buildID string) (*symtab.Table, error) {
	t.mu.Lock()
	el, ok := t.byID[buildID]
	var v *topicValue
	if ok {
		t.lru.MoveToFront(el)
		v = el.Value.(*topicValue)
	}
	t.mu.Unlock()
	if !ok {
		return nil, notFound("build id %s not on the debuginfo topic", buildID)
	}
	if v.kind != debuginfo.KindSymbols {
		return nil, notFound("debuginfo topic marks %s as kind %d", buildID, v.kind)
	}
	f, err := debuginfo.Decode(v.value)
	if err != nil {
		return nil, fmt.Errorf("decode debuginfo of %s: %w", buildID, err)
	}
	return symtab.FromDebuginfo(f, "topic"), nil
}

// Len is the number of build IDs held.
func (t *Topic) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// Bytes is what the store holds, as it counts against its budget.
func (t *Topic) Bytes() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bytes
}

// Apply stores one record of the topic: a value replaces the build ID's
// previous one unless that one is richer (ErrNotRicher), a tombstone (nil
// value) deletes a marker. A value must name the build ID of its key and
// be at most debuginfo.MaxEncodedBytes.
func (t *Topic) Apply(key, value []byte) error {
	id := string(key)
	if !ValidBuildID(id) {
		return fmt.Errorf("%w: key %.80q is not a build id", debuginfo.ErrBadFormat, id)
	}
	var v *topicValue
	if value != nil {
		if len(value) > debuginfo.MaxEncodedBytes {
			return fmt.Errorf("%w: %d bytes, limit %d", debuginfo.ErrTooLarge, len(value), debuginfo.MaxEncodedBytes)
		}
		f, err := debuginfo.Decode(value)
		if err != nil {
			return err
		}
		if f.BuildID != id {
			return fmt.Errorf("%w: key %q holds build id %.80q", debuginfo.ErrBadFormat, id, f.BuildID)
		}
		v = &topicValue{buildID: id, kind: f.Kind}
		if f.Kind == debuginfo.KindSymbols {
			// A copy: the record's value is a slice of its whole fetched
			// batch, which holding it would keep in memory uncounted.
			v.value, v.symbols, v.lines = bytes.Clone(value), len(f.Symbols), len(f.Lines)
		}
	}
	t.mu.Lock()
	if el, ok := t.byID[id]; ok {
		old := el.Value.(*topicValue)
		if old.kind == debuginfo.KindSymbols && (v == nil || v.symbols < old.symbols || (v.symbols == old.symbols && v.lines < old.lines)) {
			t.mu.Unlock()
			what := "a tombstone"
			if v != nil {
				what = fmt.Sprintf("kind %d with %d symbols and %d lines", v.kind, v.symbols, v.lines)
			}
			return fmt.Errorf("%w: build id %s holds %d symbols and %d lines, the new value is %s", ErrNotRicher, id, old.symbols, old.lines, what)
		}
		t.bytes -= old.bytes()
		t.lru.Remove(el)
		delete(t.byID, id)
	}
	if v != nil {
		t.byID[id] = t.lru.PushFront(v)
		t.bytes += v.bytes()
		for t.bytes > t.maxBytes && t.lru.Len() > 1 {
			old := t.lru.Remove(t.lru.Back()).(*topicValue)
			delete(t.byID, old.buildID)
			t.bytes -= old.bytes()
		}
	}
	t.mu.Unlock()
	if t.onChange != nil {
		t.onChange(id)
	}
	return nil
}

// quietPoll is how long a poll may return nothing before a catching-up
// follower counts the topic as read.
const quietPoll = 3 * time.Second

// Follower reads the debuginfo topic from its start into a Topic store and
// keeps following it.
type Follower struct {
	Client   *kgo.Client // consuming the debuginfo topic from the start, no group
	Admin    *kadm.Client
	Topic    string
	Store    *Topic
	Log      *slog.Logger
	OnBad    func() // a value that does not decode or names another build ID
	OnReject func() // a value poorer than the one held (ErrNotRicher)
	OnApply  func()
	// StartRetry is how long retriable errors listing the topic's offsets
	// at start are retried; 0 means two minutes.
	StartRetry time.Duration

	caughtUp     chan struct{}
	caughtUpOnce sync.Once

	posMu   sync.Mutex
	pos     map[int32]int64 // per partition, the offset after the last record read (control records too)
	moved   chan struct{}   // closed and replaced whenever pos moves
	listing *endListing     // the latest listing of the topic's end offsets
}

// endListing is one listing of the debuginfo topic's end offsets (read
// committed), shared by every miss that happened before it started.
type endListing struct {
	started time.Time
	done    chan struct{}
	ends    map[int32]int64
	err     error
}

// advance notes that partition p has been read up to next.
func (f *Follower) advance(p int32, next int64) {
	f.posMu.Lock()
	defer f.posMu.Unlock()
	if f.pos == nil {
		f.pos = map[int32]int64{}
	}
	if next <= f.pos[p] {
		return
	}
	f.pos[p] = next
	if f.moved != nil {
		close(f.moved)
		f.moved = nil
	}
}

// WaitEnd waits until the follower has read every record the topic held
// (committed) at a moment at or after since, or ctx ends. A lookup that
// missed at since then knows whether the agent's value for it was already
// on the topic, even if the follower had not read it yet.
func (f *Follower) WaitEnd(ctx context.Context, since time.Time) error {
	l := f.listEnds(since)
	select {
	case <-l.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if l.err != nil {
		return l.err
	}
	for {
		f.posMu.Lock()
		reached := true
		for p, end := range l.ends {
			if f.pos[p] < end {
				reached = false
				break
			}
		}
		if reached {
			f.posMu.Unlock()
			return nil
		}
		if f.moved == nil {
			f.moved = make(chan struct{})
		}
		moved := f.moved
		f.posMu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// listEnds returns a listing started at or after since, starting one if
// there is none: a burst of misses costs one request to the broker.
func (f *Follower) listEnds(since time.Time) *endListing {
	f.posMu.Lock()
	defer f.posMu.Unlock()
	if l := f.listing; l != nil && !l.started.Before(since) {
		return l
	}
	l := &endListing{started: time.Now(), done: make(chan struct{})}
	f.listing = l
	go func() {
		defer close(l.done)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		listed, err := f.Admin.ListCommittedOffsets(ctx, f.Topic)
		if err == nil {
			err = listed.Error()
		}
		if err != nil {
			l.err = fmt.Errorf("list end offsets of %s: %w", f.Topic, err)
			return
		}
		l.ends = map[int32]int64{}
		listed.Each(func(o kadm.ListedOffset) { l.ends[o.Partition] = o.Offset })
	}()
	return l
}

// CaughtUp is closed once every record that existed at start has been
// applied: the symbolizer waits for it so that a restart does not produce
// profiles symbolized with less than what the topic holds.
func (f *Follower) CaughtUp() <-chan struct{} {
	f.caughtUpOnce.Do(func() { f.caughtUp = make(chan struct{}) })
	return f.caughtUp
}

// Run follows the topic until ctx ends. At start, errors the broker calls
// retriable (a topic created a moment ago that the broker's metadata does
// not show yet, a leader election) are retried for up to StartRetry: the
// runner waits for CaughtUp, and giving up on the first request would stop
// the instance over a hiccup. Past StartRetry the error is returned, so an
// instance that cannot read the topic stops (and leaves its consumer group)
// rather than holding partitions it never processes.
func (f *Follower) Run(ctx context.Context) error {
	f.CaughtUp()
	caughtUp := f.caughtUp
	retryFor := f.StartRetry
	if retryFor <= 0 {
		retryFor = defaultStartRetry
	}
	began := time.Now()
	var pending map[int32]int64
	for backoff := startBackoff; ; backoff = min(2*backoff, maxStartBackoff) {
		var err error
		pending, err = f.pending(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if !kerr.IsRetriable(err) {
			return err
		}
		if time.Since(began)+backoff > retryFor {
			return fmt.Errorf("%w (retried for %s)", err, time.Since(began).Round(time.Millisecond))
		}
		f.Log.Warn("list debuginfo offsets, retrying", "topic", f.Topic, "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
	if len(pending) == 0 {
		close(caughtUp)
	}
	for {
		pollCtx, cancel := ctx, context.CancelFunc(func() {})
		if len(pending) > 0 {
			// A partition whose tail is transaction markers never shows its
			// last offset: a quiet poll while catching up means caught up.
			pollCtx, cancel = context.WithTimeout(ctx, quietPoll)
		}
		fetches := f.Client.PollFetches(pollCtx)
		quiet := pollCtx.Err() != nil && ctx.Err() == nil
		cancel()
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return nil
		}
		if quiet && len(pending) > 0 {
			clear(pending)
			f.Log.Info("debuginfo topic loaded", "topic", f.Topic, "build_ids", f.Store.Len())
			close(caughtUp)
			continue
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				f.Log.Warn("fetch debuginfo", "topic", topic, "partition", p, "err", err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			// Control records (transaction markers, kept by DebuginfoOpts)
			// only move the position: the topic's end can be one.
			defer f.advance(r.Partition, r.Offset+1)
			if r.Attrs.IsControl() {
				return
			}
			if err := f.Store.Apply(r.Key, r.Value); err != nil {
				f.Log.Warn("skip debuginfo record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "build_id", fmt.Sprintf("%.80q", r.Key), "err", err)
				switch {
				case errors.Is(err, ErrNotRicher) && f.OnReject != nil:
					f.OnReject()
				case !errors.Is(err, ErrNotRicher) && f.OnBad != nil:
					f.OnBad()
				}
			} else if f.OnApply != nil {
				f.OnApply()
			}
		})
		if len(pending) > 0 {
			fetches.EachPartition(func(p kgo.FetchTopicPartition) {
				if end, ok := pending[p.Partition]; ok && len(p.Records) > 0 && p.Records[len(p.Records)-1].Offset+1 >= end {
					delete(pending, p.Partition)
				}
			})
			if len(pending) == 0 {
				f.Log.Info("debuginfo topic loaded", "topic", f.Topic, "build_ids", f.Store.Len())
				close(caughtUp)
			}
		}
	}
}

// Backoff between attempts to list the topic's offsets at start.
const (
	startBackoff      = 100 * time.Millisecond
	maxStartBackoff   = 5 * time.Second
	defaultStartRetry = 2 * time.Minute
)

// pending lists the partitions that hold records at start, with their end
// offsets: the follower has caught up once it has read up to those.
func (f *Follower) pending(ctx context.Context) (map[int32]int64, error) {
	ends, err := f.Admin.ListEndOffsets(ctx, f.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", f.Topic, err)
	}
	pending := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			pending[o.Partition] = o.Offset
		}
	})
	// A partition with nothing to read is read to its end already.
	defer func() {
		ends.Each(func(o kadm.ListedOffset) {
			if _, ok := pending[o.Partition]; !ok {
				f.advance(o.Partition, o.Offset)
			}
		})
	}()
	// Start offsets matter for the catch-up check: a compacted or deleted
	// prefix means the first record can be past 0.
	starts, err := f.Admin.ListStartOffsets(ctx, f.Topic)
	if err == nil {
		starts.Each(func(o kadm.ListedOffset) {
			if end, ok := pending[o.Partition]; ok && o.Err == nil && o.Offset >= end {
				delete(pending, o.Partition)
			}
		})
	}
	return pending, nil
}

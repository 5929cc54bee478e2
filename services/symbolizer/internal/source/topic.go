package source

import (
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
}

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

// Apply stores one record of the topic: a value replaces the build ID's
// previous one, a tombstone (nil value) deletes it.
func (t *Topic) Apply(key, value []byte) error {
	id := string(key)
	var v *topicValue
	if value != nil {
		f, err := debuginfo.Decode(value)
		if err != nil {
			return err
		}
		if f.BuildID != "" && f.BuildID != id {
			return fmt.Errorf("%w: key %q holds build id %q", debuginfo.ErrBadFormat, id, f.BuildID)
		}
		v = &topicValue{buildID: id, kind: f.Kind}
		if f.Kind == debuginfo.KindSymbols {
			v.value = value
		}
	}
	t.mu.Lock()
	if el, ok := t.byID[id]; ok {
		t.bytes -= len(el.Value.(*topicValue).value)
		t.lru.Remove(el)
		delete(t.byID, id)
	}
	if v != nil {
		t.byID[id] = t.lru.PushFront(v)
		t.bytes += len(v.value)
		for t.bytes > t.maxBytes && t.lru.Len() > 1 {
			old := t.lru.Remove(t.lru.Back()).(*topicValue)
			delete(t.byID, old.buildID)
			t.bytes -= len(old.value)
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
	Client  *kgo.Client // consuming the debuginfo topic from the start, no group
	Admin   *kadm.Client
	Topic   string
	Store   *Topic
	Log     *slog.Logger
	OnBad   func() // a value that does not decode
	OnApply func()
	// StartRetry is how long retriable errors listing the topic's offsets
	// at start are retried; 0 means two minutes.
	StartRetry time.Duration

	caughtUp     chan struct{}
	caughtUpOnce sync.Once
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
			if err := f.Store.Apply(r.Key, r.Value); err != nil {
				f.Log.Warn("skip debuginfo record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "build_id", string(r.Key), "err", err)
				if f.OnBad != nil {
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

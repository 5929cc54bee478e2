// Package indexer consumes symbolized profiles and writes their stacks and
// samples to OpenSearch: a batch of records is turned into documents
// (internal/convert), written with pkg/bulk, the records OpenSearch rejects
// (or that cannot be decoded) go to the DLQ, and only then are the batch's
// offsets committed. Several batches may be written at once; their commits
// follow one another in the order the batches were made.
package indexer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/indexer/internal/convert"
)

// Service names the indexer in DLQ records.
const Service = "stackstream-indexer"

// Options configure an Indexer.
type Options struct {
	Names    indices.Names
	DLQTopic string
	// BatchBytes bounds the documents of one batch; FlushInterval bounds how
	// long the first record of a batch waits.
	BatchBytes    int
	FlushInterval time.Duration
	// ShutdownTimeout is how long the last batch may take to be written and
	// committed after the context ends (OpenSearch may be down).
	ShutdownTimeout time.Duration
	// MaxInFlight is how many batches are written at once (each one bulk
	// request at a time); InFlightBytes bounds their documents together
	// (one batch always goes, whatever its size). Their commits stay in
	// order: a batch's offsets are committed only after it and every
	// earlier batch are stored, and never after an earlier batch failed.
	MaxInFlight   int
	InFlightBytes int
	// MaxRebalanceDelay bounds how long a rebalance waits under steady load
	// (the write pipeline is drained to let it through).
	MaxRebalanceDelay time.Duration
	// StackCacheSize is how many stored stack IDs are remembered so that
	// stacks seen again are not re-sent; 0 picks a default, -1 disables it.
	// It is two generations of half as many each (pkg/cache): the older
	// is dropped when the newer is full, and a stack still in use is kept
	// (its memory stays: 24-43 bytes a stack as Go's maps grow, 27-43 MiB
	// at the default).
	StackCacheSize int
	// Workers decode and convert the records of a poll in parallel; 0 is
	// one per CPU. Documents are added to the batch in record order.
	Workers int
	// MaxAge and MaxClockSkew are the window of profile times indexed:
	// [now - MaxAge, now + MaxClockSkew]. A profile outside it goes to the
	// DLQ (time_out_of_range): it would create an index retention deletes at
	// once, or one for a future day it never deletes. MaxAge is the
	// retention (0 accepts any past time); MaxClockSkew 0 is
	// record.DefaultMaxClockSkew.
	MaxAge       time.Duration
	MaxClockSkew time.Duration
	// Limits bound the conversion of one record; zero is
	// convert.DefaultLimits.
	Limits  convert.Limits
	Logger  *slog.Logger
	Metrics *Metrics
	Now     func() time.Time
}

// Defaults of Options.
const (
	DefaultBatchBytes      = 8 << 20
	DefaultFlushInterval   = time.Second
	DefaultShutdownTimeout = 30 * time.Second
	DefaultStackCacheSize  = 1 << 20
	DefaultMaxInFlight     = 4
	DefaultInFlightBytes   = 32 << 20
	// DefaultMaxRebalanceDelay stays well inside franz-go's default 60 s
	// rebalance timeout.
	DefaultMaxRebalanceDelay = 10 * time.Second
	pollRecords              = 1000
	convertChunk             = 64
	convertChunkBytes        = 8 << 20
	// chunkDocBytes stops a chunk's conversion once its documents take
	// that much (each record's at most maxDocBytes).
	chunkDocBytes = 32 << 20
	// maxStackDocBytes bounds the stacks documents one record sends,
	// estimated before they are encoded: deep stacks of long names (64 KiB
	// each within the decode limits) could make gigabytes.
	maxStackDocBytes = 64 << 20
)

// Indexer is the consume-write-commit loop.
type Indexer struct {
	kcl  *kgo.Client
	w    Writer
	opts Options
	log  *slog.Logger
	m    *Metrics
	// stored is the stack IDs OpenSearch acknowledged, with the newest
	// last_seen day written.
	stored storedStacks
	// sending is the stack IDs of the batches being written: the next
	// batches need not send them again (each would be a second scripted
	// update of the same document). Should a write fail, Run stops and the
	// records are redelivered.
	sending map[string]day
	conv    *convert.Converter
	// script is the encoded TouchStackScript of scriptDay.
	script    []byte
	scriptDay string
	// convertRecord is convert; tests replace it to reach the record
	// boundary's recover.
	convertRecord func(*kgo.Record, convert.Known) (convert.Documents, error)
}

// ConsumerOpts are the client options the Indexer needs: a group reading
// committed records only, rebalances held while a batch is in flight, and
// offsets committed by the Indexer alone.
func ConsumerOpts(group, topic string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.BlockRebalanceOnPoll(),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
}

// Writer stores documents: a *bulk.Writer, or a route.Router over one
// that resolves index generations.
type Writer interface {
	Write(ctx context.Context, items []bulk.Item) ([]bulk.Rejected, error)
}

// New returns an Indexer reading with kcl (built with ConsumerOpts) and
// writing with w (its bulk Metrics should be opts.Metrics.Bulk).
func New(kcl *kgo.Client, w Writer, opts Options) *Indexer {
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = DefaultBatchBytes
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.MaxRebalanceDelay <= 0 {
		opts.MaxRebalanceDelay = DefaultMaxRebalanceDelay
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.InFlightBytes <= 0 {
		opts.InFlightBytes = DefaultInFlightBytes
	}
	if opts.StackCacheSize == 0 {
		opts.StackCacheSize = DefaultStackCacheSize
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxClockSkew <= 0 {
		opts.MaxClockSkew = record.DefaultMaxClockSkew
	}
	if opts.Limits == (convert.Limits{}) {
		opts.Limits = convert.DefaultLimits()
	}
	ix := &Indexer{kcl: kcl, w: w, opts: opts, log: opts.Logger, m: opts.Metrics, stored: newStoredStacks(opts.StackCacheSize),
		sending: map[string]day{}, conv: convert.New(opts.Limits)}
	ix.convertRecord = ix.convert
	return ix
}

// batch is the work between two commits.
type batch struct {
	started time.Time
	records int
	bytes   int
	items   []bulk.Item
	owner   map[docKey]*kgo.Record // the record each document came from
	stacks  map[string]day         // stack IDs already in items -> their last_seen day
	dlq     []*kgo.Record          // dead letters ready to produce
	raw     int64
	samples int
	last    map[topicPartition]*kgo.Record
}

// docKey names a document: its index and _id (a struct key, so that
// filling the batch allocates no joined string per document).
type docKey struct{ index, id string }

type topicPartition struct {
	topic     string
	partition int32
}

func newBatch() *batch {
	return &batch{owner: map[docKey]*kgo.Record{}, stacks: map[string]day{}, last: map[topicPartition]*kgo.Record{}}
}

func (b *batch) lastRecords() []*kgo.Record {
	out := make([]*kgo.Record, 0, len(b.last))
	for _, r := range b.last {
		out = append(out, r)
	}
	return out
}

// Run consumes until ctx ends, then writes and commits the batches in hand
// (within ShutdownTimeout) and returns nil. It returns an error when a batch
// cannot be stored or dead-lettered: its offsets and those of every later
// batch are then left uncommitted.
//
// Batches are written in the background, up to MaxInFlight (and
// InFlightBytes) at once, while the next is polled and converted, so the
// indexer's CPU work overlaps OpenSearch's and OpenSearch gets several bulk
// requests to work on. A full batch goes out at once, waiting for the
// oldest write when the pipeline is full; a due one goes out when there is
// room and otherwise keeps filling up to BatchBytes: the slower OpenSearch,
// the larger (and cheaper per document) the requests, and conversion never
// stops for a batch that is merely due. Commits follow the batches' order
// (see flush). Rebalances wait until nothing polled is uncommitted: that
// happens whenever the stream idles, and at least every MaxRebalanceDelay
// under load, when the pipeline is drained.
func (ix *Indexer) Run(ctx context.Context) error {
	// Writes outlive ctx by ShutdownTimeout, so a stop signal still lets the
	// batches in hand reach OpenSearch and their offsets be committed.
	writeCtx, cancelWrite := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWrite()
	stopTimer := context.AfterFunc(ctx, func() { time.AfterFunc(ix.opts.ShutdownTimeout, cancelWrite) })
	defer stopTimer()

	// Rebalances are held from a poll until its batch is committed; leaving
	// the group on Close needs them released, whatever Run returns with.
	defer ix.kcl.AllowRebalance()

	b := newBatch()
	var flights []*flight // oldest first
	flightBytes := 0
	defer func() {
		// On an error the later writes are abandoned (they commit nothing
		// after a failed batch); Run returns once none is left running.
		cancelWrite()
		for _, f := range flights {
			<-f.done
		}
		ix.m.InFlight.Set(0)
	}()
	// reapOldest waits for the oldest write and returns its error.
	reapOldest := func() error {
		f := flights[0]
		flights[0] = nil
		flights = flights[1:]
		flightBytes -= f.b.bytes
		ix.m.InFlight.Set(float64(len(flights)))
		return ix.reap(f)
	}
	reapFinished := func() error {
		for len(flights) > 0 && flights[0].finished() {
			if err := reapOldest(); err != nil {
				return err
			}
		}
		return nil
	}
	// room reports whether b may go out now; with nothing in flight it
	// always may, however large.
	room := func() bool {
		return len(flights) == 0 || (len(flights) < ix.opts.MaxInFlight && flightBytes+b.bytes <= ix.opts.InFlightBytes)
	}
	// send writes b in the background, after waiting for the oldest writes
	// until there is room.
	send := func() error {
		for !room() {
			if err := reapOldest(); err != nil {
				return err
			}
		}
		var prev *flight
		if len(flights) > 0 {
			prev = flights[len(flights)-1]
		}
		flights = append(flights, ix.start(writeCtx, b, prev))
		flightBytes += b.bytes
		ix.m.InFlight.Set(float64(len(flights)))
		b = newBatch()
		return nil
	}
	drain := func() error {
		if b.records > 0 {
			if err := send(); err != nil {
				return err
			}
		}
		for len(flights) > 0 {
			if err := reapOldest(); err != nil {
				return err
			}
		}
		return nil
	}
	released := ix.opts.Now()
	for {
		base, cancelBase := context.WithCancel(ctx)
		pollCtx, cancelDeadline := base, context.CancelFunc(func() {})
		if b.records > 0 && room() {
			// A due batch with no room waits for the oldest write (below).
			pollCtx, cancelDeadline = context.WithDeadline(base, b.started.Add(ix.opts.FlushInterval))
		}
		if len(flights) > 0 {
			// Wake up when the oldest write ends, to reap it, send a due
			// batch or release a waiting rebalance even if no record
			// arrives.
			go func(done <-chan struct{}) {
				select {
				case <-done:
					cancelBase()
				case <-base.Done():
				}
			}(flights[0].done)
		}
		fetches := ix.kcl.PollRecords(pollCtx, pollRecords)
		cancelDeadline()
		cancelBase()
		if fetches.IsClientClosed() {
			return drain()
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				ix.log.Warn("fetch", "topic", topic, "partition", p, "err", err)
			}
		})
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if n := len(p.Records); n > 0 {
				ix.m.SetLag(p.Partition, p.HighWatermark, p.Records[n-1].Offset)
			}
		})
		// A poll can hold up to pollRecords records: converted a chunk at a
		// time (at most convertChunk records and about convertChunkBytes of
		// values, so that the documents held at once stay bounded), a batch
		// that fills up is written at once rather than after the whole poll.
		for recs := fetches.Records(); len(recs) > 0; {
			n, size := 0, 0
			for n < len(recs) && n < convertChunk && size < convertChunkBytes {
				size += len(recs[n].Value)
				n++
			}
			chunk := recs[:n]
			results := ix.convertAll(b, chunk)
			recs = recs[len(results):]
			for i, c := range results {
				ix.add(b, chunk[i], c)
				if b.bytes >= ix.opts.BatchBytes {
					if err := send(); err != nil {
						return err
					}
				}
			}
		}

		if ctx.Err() != nil {
			return drain()
		}
		if err := reapFinished(); err != nil {
			return err
		}
		now := ix.opts.Now()
		// A full batch went out above; a due one waits for room, filling
		// meanwhile.
		if b.records > 0 && room() && !now.Before(b.started.Add(ix.opts.FlushInterval)) {
			if err := send(); err != nil {
				return err
			}
		}
		switch {
		case len(flights) == 0 && b.records == 0:
			ix.kcl.AllowRebalance()
			released = now
		case now.Sub(released) >= ix.opts.MaxRebalanceDelay:
			if err := drain(); err != nil {
				return err
			}
			ix.kcl.AllowRebalance()
			released = ix.opts.Now()
		}
	}
}

// flight is a batch being stored; prev is the batch made before it, still
// being stored when this one started (its commit goes first).
type flight struct {
	b    *batch
	prev *flight
	done chan struct{}
	err  error
}

func (f *flight) finished() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// start stores b in the background, committing its offsets after prev's.
func (ix *Indexer) start(ctx context.Context, b *batch, prev *flight) *flight {
	f := &flight{b: b, prev: prev, done: make(chan struct{})}
	for id, d := range b.stacks {
		ix.sending[id] = d
	}
	go func() {
		defer close(f.done)
		f.err = ix.flush(ctx, f)
		f.prev = nil
	}()
	return f
}

// reap waits for f, remembers the stacks it stored, and returns its error.
func (ix *Indexer) reap(f *flight) error {
	<-f.done
	for id, d := range f.b.stacks {
		// A later batch may send the stack again for a later day.
		if old, ok := ix.sending[id]; ok && old == d {
			delete(ix.sending, id)
		}
	}
	if f.err == nil {
		for id, d := range f.b.stacks {
			if k, ok := keyOf(id); ok {
				ix.stored.add(k, d)
			}
		}
	}
	ix.countCaches()
	return f.err
}

// countCaches sets the cache gauges.
func (ix *Indexer) countCaches() {
	ix.m.CacheEntries.WithLabelValues("stored_stacks").Set(float64(ix.stored.len()))
	ix.m.CacheMaxEntries.WithLabelValues("stored_stacks").Set(float64(max(ix.opts.StackCacheSize, 0)))
	for _, c := range ix.conv.Caches() {
		ix.m.CacheEntries.WithLabelValues(c.Name).Set(float64(c.Entries))
		ix.m.CacheMaxEntries.WithLabelValues(c.Name).Set(float64(c.Max))
	}
}

// converted is a record's documents or the reason it has none.
type converted struct {
	docs convert.Documents
	err  error
}

// convertAll converts recs on up to Workers goroutines (decoding pprof is
// most of the indexer's CPU), in order, until their samples documents take
// chunkDocBytes: it returns the results of the first records, at least one,
// and the caller converts the others next. The stacks known stored or sent
// (by b, the batches in flight, or earlier ones) come without frames: the
// maps that say so are only read while the workers run.
func (ix *Indexer) convertAll(b *batch, recs []*kgo.Record) []converted {
	known := func(id string, at time.Time) bool { return ix.known(b, id, dayOf(at)) }
	out := make([]converted, len(recs))
	var next, size atomic.Int64
	var wg sync.WaitGroup
	for range min(ix.opts.Workers, len(recs)) {
		wg.Go(func() {
			for size.Load() < chunkDocBytes {
				i := int(next.Add(1)) - 1
				if i >= len(recs) {
					return
				}
				out[i].docs, out[i].err = ix.convertSafe(recs[i], known)
				for _, s := range out[i].docs.Samples {
					size.Add(int64(len(s.Doc)))
				}
			}
		})
	}
	wg.Wait()
	// Every index taken was converted.
	return out[:min(int(next.Load()), len(recs))]
}

// convertSafe is the record boundary: nothing in a record's content may stop
// the loop, so a panic while converting it becomes its DLQ reason. The
// panic is a bug to fix (its stack is logged); this is the last line.
func (ix *Indexer) convertSafe(r *kgo.Record, known convert.Known) (docs convert.Documents, err error) {
	defer func() {
		if p := recover(); p != nil {
			ix.log.Error("convert record panicked", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			docs, err = convert.Documents{}, &deadLetter{reason: ReasonPanic, err: fmt.Errorf("convert record: panic: %v", p)}
		}
	}()
	return ix.convertRecord(r, known)
}

// add turns a converted record into documents of b, or into a dead letter.
func (ix *Indexer) add(b *batch, r *kgo.Record, c converted) {
	if b.records == 0 {
		b.started = ix.opts.Now()
	}
	b.records++
	b.last[topicPartition{r.Topic, r.Partition}] = r
	docs, err := c.docs, c.err
	if err != nil {
		b.dlq = append(b.dlq, ix.deadLetter(r, err))
		return
	}
	stacksIndex := ix.opts.Names.Stacks()
	first, stackBytes := len(b.items), 0
	var dayText string
	var d day
	var dayAt time.Time
	for _, s := range docs.Stacks {
		// A stack is written once per day it is used: created the first
		// time, its last_seen moved forward on later days (retention deletes
		// the stacks unused for long). One known when converted still is:
		// stored stays stored, and a failed write stops Run.
		if s.Known {
			continue
		}
		if !s.At.Equal(dayAt) || dayText == "" {
			// A record's stacks mostly share its time: format it once.
			dayText, d, dayAt = indices.DayOf(s.At), dayOf(s.At), s.At
		}
		if ix.known(b, s.ID, d) {
			continue
		}
		if stackBytes += stackDocEstimate(s.Frames); stackBytes > maxStackDocBytes {
			b.unadd(first)
			b.dlq = append(b.dlq, ix.deadLetter(r, fmt.Errorf("%w: the stacks documents of the record take more than %d bytes", record.ErrTooLarge, maxStackDocBytes)))
			return
		}
		doc, err := s.Doc()
		if err != nil {
			b.unadd(first)
			b.dlq = append(b.dlq, ix.deadLetter(r, err))
			return
		}
		b.stacks[s.ID] = d
		upd := ix.touchStack(doc, dayText)
		b.items = append(b.items, bulk.Item{Index: stacksIndex, ID: s.ID, Update: upd, Doc: doc})
		b.owner[docKey{stacksIndex, s.ID}] = r
		b.bytes += len(upd) + len(s.ID) + len(stacksIndex) + 40
	}
	for _, s := range docs.Samples {
		b.items = append(b.items, bulk.Item{Index: s.Index, ID: s.ID, Doc: s.Doc})
		b.owner[docKey{s.Index, s.ID}] = r
		b.bytes += len(s.Doc) + len(s.ID) + len(s.Index) + 40
		b.raw += s.Raw
	}
	b.samples += len(docs.Samples)
}

// unadd removes the stacks documents from items[first:] again: their record
// goes to the DLQ.
func (b *batch) unadd(first int) {
	for _, it := range b.items[first:] {
		delete(b.stacks, it.ID)
		delete(b.owner, docKey{it.Index, it.ID})
		b.bytes -= len(it.Update) + len(it.ID) + len(it.Index) + 40
	}
	clear(b.items[first:])
	b.items = b.items[:first]
}

// touchStack is the update of a stacks document: created from doc when
// missing, else its last_seen moved forward to day. The script is encoded
// once per day.
func (ix *Indexer) touchStack(doc []byte, day string) []byte {
	if ix.scriptDay != day {
		ix.script, _ = json.Marshal(indices.TouchStackScript(day))
		ix.scriptDay = day
	}
	script := ix.script
	out := make([]byte, 0, len(doc)+len(script)+32)
	out = append(out, `{"script":`...)
	out = append(out, script...)
	out = append(out, `,"upsert":`...)
	out = append(out, doc...)
	return append(out, '}')
}

// stackDocEstimate is about the size of a stacks document of frames (the
// function names twice: frames and functions); JSON escapes can make a name
// of control characters up to 6 times longer.
func stackDocEstimate(frames []indices.Frame) int {
	n := 128
	for _, f := range frames {
		n += 64 + 2*len(f.Function) + len(f.File) + len(f.Binary)
	}
	return n
}

// known reports whether the document of stack id is in b, being sent, or
// stored for day d or later.
func (ix *Indexer) known(b *batch, id string, d day) bool {
	if v, ok := b.stacks[id]; ok && v >= d {
		return true
	}
	if v, ok := ix.sending[id]; ok && v >= d {
		return true
	}
	k, ok := keyOf(id)
	if !ok {
		return false
	}
	return ix.stored.has(k, d)
}

// stackKey is a stack ID (indices.StackID, 16 bytes) held inline.
type stackKey [16]byte

// keyOf is the stackKey of id; an ID of another length is not remembered.
func keyOf(id string) (k stackKey, ok bool) {
	return k, copy(k[:], id) == len(id) && len(id) == len(k)
}

// day is a UTC day as a number (days since 1970-01-01), ordered as
// indices.DayOf's strings are.
type day int32

func dayOf(t time.Time) day {
	s := t.Unix()
	if s < 0 {
		s -= 86399 // round down
	}
	return day(s / 86400)
}

// convert is the documents of r, within the profile time window.
func (ix *Indexer) convert(r *kgo.Record, known convert.Known) (convert.Documents, error) {
	meta, err := record.ParseMeta(r.Headers)
	if err != nil {
		return convert.Documents{}, &deadLetter{reason: ReasonHeaders, err: fmt.Errorf("parse headers: %w", err)}
	}
	meta.Host = record.Host(meta, r.Key)
	// Also for a profile without samples, which makes no document whose
	// label set would say so.
	if err := convert.CheckHost(meta.Host); err != nil {
		return convert.Documents{}, err
	}
	part := record.HeaderValue(r.Headers, record.HeaderPart)
	docs, path, err := ix.conv.Record(ix.opts.Names, meta, part, r.Value, r.Timestamp, known)
	ix.m.Decoded.WithLabelValues(string(path)).Inc()
	if err != nil {
		return convert.Documents{}, err
	}
	if err := record.CheckTime(docs.At, ix.opts.Now(), ix.opts.MaxAge, ix.opts.MaxClockSkew); err != nil {
		return convert.Documents{}, fmt.Errorf("check profile time: %w", err)
	}
	ix.m.countLabelDrops(docs.Labels)
	return docs, nil
}

// DLQ reasons: the value of stackstream_indexer_dlq_total's reason
// label, and the first word of a DLQ record's reason header.
const (
	ReasonHeaders     = "headers"           // missing or unknown headers
	ReasonNotGzip     = "not_gzip"          // value not gzip, or corrupt
	ReasonNotPprof    = "not_pprof"         // not a pprof message
	ReasonTooLarge    = "too_large"         // beyond a decode limit, or a document too large for OpenSearch (413)
	ReasonInvalid     = "invalid_profile"   // pprof, but not self-consistent
	ReasonTime        = "time_out_of_range" // outside [now - MaxAge, now + MaxClockSkew]
	ReasonHostTooLong = "host_too_long"     // host beyond record.MaxHostBytes
	ReasonPanic       = "panic"             // converting it panicked (a bug)
	ReasonRejected    = "rejected"          // OpenSearch refused a document for good
)

// deadLetter is an error with its DLQ reason.
type deadLetter struct {
	reason string
	err    error
}

func (d *deadLetter) Error() string { return d.err.Error() }
func (d *deadLetter) Unwrap() error { return d.err }

// reasonOf maps a record's error to its DLQ reason.
func reasonOf(err error) string {
	var dl *deadLetter
	switch {
	case errors.As(err, &dl):
		return dl.reason
	case errors.Is(err, record.ErrTimeOutOfRange):
		return ReasonTime
	case errors.Is(err, convert.ErrHostTooLong):
		return ReasonHostTooLong
	case errors.Is(err, record.ErrTooLarge):
		return ReasonTooLarge
	case errors.Is(err, record.ErrNotGzip):
		return ReasonNotGzip
	case errors.Is(err, record.ErrNotPprof):
		return ReasonNotPprof
	}
	return ReasonInvalid
}

// deadLetter is the DLQ record of r, which cannot be indexed because of err.
func (ix *Indexer) deadLetter(r *kgo.Record, err error) *kgo.Record {
	reason := reasonOf(err)
	ix.m.DLQ.WithLabelValues(reason).Inc()
	ix.log.Warn("dead-letter record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason, "err", err)
	return record.DLQRecord(ix.opts.DLQTopic, Service, r, fmt.Errorf("%s: %w", reason, err))
}

// flush stores f's documents, dead-letters the records OpenSearch rejected
// and those that could not be decoded, waits for the batch before it, and
// only then commits f's offsets: the last record of each partition in f,
// which covers every earlier record of that partition, so no commit may
// pass a batch not yet stored. If the batch before failed, f commits
// nothing: its records are redelivered with the failed batch's, and
// written again under the same IDs.
func (ix *Indexer) flush(ctx context.Context, f *flight) error {
	b := f.b
	start := time.Now()
	rejected, err := ix.w.Write(ctx, b.items)
	if err != nil {
		return fmt.Errorf("write batch of %d records: %w", b.records, err)
	}
	dead := map[*kgo.Record]bool{}
	for _, rj := range rejected {
		r := b.owner[docKey{rj.Item.Index, rj.Item.ID}]
		if r == nil || dead[r] {
			continue
		}
		dead[r] = true
		reason := ReasonRejected
		if rj.Status == http.StatusRequestEntityTooLarge {
			reason = ReasonTooLarge
		}
		b.dlq = append(b.dlq, ix.deadLetter(r, &deadLetter{reason: reason,
			err: fmt.Errorf("opensearch rejected document %s/%s: HTTP %d: %s", rj.Item.Index, rj.Item.ID, rj.Status, rj.Reason)}))
	}
	if len(b.dlq) > 0 {
		if err := ix.kcl.ProduceSync(ctx, b.dlq...).FirstErr(); err != nil {
			return fmt.Errorf("produce %d dead letters to %s: %w", len(b.dlq), ix.opts.DLQTopic, err)
		}
	}
	if f.prev != nil {
		<-f.prev.done
		if f.prev.err != nil {
			return fmt.Errorf("batch of %d records stored, not committed: an earlier batch failed", b.records)
		}
	}
	// The next batches may already be polled: commit exactly this one's
	// offsets, the last record of each partition.
	commitStart := time.Now()
	err = ix.kcl.CommitRecords(ctx, b.lastRecords()...)
	ix.m.CommitSeconds.Observe(time.Since(commitStart).Seconds())
	if err != nil {
		// The documents are stored; redelivery after a failed commit only
		// overwrites them with the same content.
		ix.m.Commits.WithLabelValues("error").Inc()
		ix.log.Warn("commit offsets", "err", err)
	} else {
		ix.m.Commits.WithLabelValues("ok").Inc()
	}
	ix.m.Records.WithLabelValues("indexed").Add(float64(b.records - len(b.dlq)))
	ix.m.Records.WithLabelValues("dlq").Add(float64(len(b.dlq)))
	ix.m.Docs.WithLabelValues("stacks").Add(float64(len(b.stacks)))
	ix.m.Docs.WithLabelValues("samples").Add(float64(b.samples))
	ix.m.Raw.Add(float64(b.raw))
	ix.m.Batches.Inc()
	ix.m.BatchDur.Observe(time.Since(start).Seconds())
	ix.log.Debug("batch stored", "records", b.records, "documents", len(b.items), "dlq", len(b.dlq), "took", time.Since(start))
	return nil
}

// CheckTopics fails with a line naming the first topic that does not exist,
// so a missing `stackctl init` stops start-up instead of stalling the first
// dead letter.
func CheckTopics(ctx context.Context, kcl *kgo.Client, topics ...string) error {
	details, err := kadm.NewClient(kcl).ListTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	for _, t := range topics {
		d, ok := details[t]
		if !ok || d.Err != nil {
			return fmt.Errorf("kafka topic %s is missing: run stackctl init (or check STACKSTREAM_KAFKA_TOPIC_PREFIX)", t)
		}
	}
	return nil
}

// Package pipeline runs the rollup consumer: it reads profiles.symbolized in
// a consumer group, folds each profile into its partition's windows, writes
// the closed windows to OpenSearch, and commits an offset only once every
// window holding a record below it is stored and evicted.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/rollup/internal/aggregate"
)

// ServiceName is written into DLQ records.
const ServiceName = "stackstream-rollup"

// Writer stores documents; *bulk.Writer is the real one.
type Writer interface {
	Write(ctx context.Context, items []bulk.Item) ([]bulk.Rejected, error)
}

// Config of a Rollup.
type Config struct {
	Topics record.Topics
	Group  string
	Window aggregate.Config
	// MaxPollRecords bounds one batch between writes.
	MaxPollRecords int
	// FlushTimeout bounds the final write on shutdown and on revoke; what is
	// not stored by then is not committed and is read again by the next owner.
	FlushTimeout time.Duration
	// IdleFlush writes the open windows of a partition that received no
	// record for this long (wall clock): its watermark stands still, so
	// nothing else would write the last minutes of a host that went quiet.
	// The windows stay in memory, so later records still recompute them.
	// 0 disables it.
	IdleFlush time.Duration
	// Limits bound what decoding one record may allocate; the zero value
	// means record.DefaultLimits.
	Limits record.Limits
	// Snapshots, when set, stores the partitions' state so that their
	// next owner goes on from it (snapshots.go).
	Snapshots *Snapshots
	Now       func() time.Time
}

// Rollup is the consumer. Build it with New, create the Kafka client with
// ClientOpts, then Run.
type Rollup struct {
	cfg Config
	w   Writer
	log *slog.Logger
	m   *metrics

	mu     sync.Mutex // partition state: the poll loop and the rebalance callbacks
	cl     *kgo.Client
	parts  map[int32]*aggregate.Partition
	active map[int32]time.Time // when each partition last had records
	// unsent holds DLQ records whose produce failed. Their offsets already
	// count as handled, so every later flush sends them before it commits:
	// a commit never passes a record that is neither counted nor in the DLQ.
	unsent []*kgo.Record
	// stopping is set once the final flush of Run is over: leaving the
	// group on Close then revokes every partition, and writing them again
	// would add a second FlushTimeout to the stop (a final write that could
	// not finish would run twice, and SIGTERM would wait for both).
	stopping bool
	// writing holds each partition's ended hour being written in the
	// background (hourwrite.go).
	writing map[int32]*hourWrite
	// hourSlot is held by the hour write storing its documents.
	hourSlot chan struct{}
	// wake ends the poll in progress: a partition whose hour is stored
	// is flushed and committed without waiting for its next record.
	wake context.CancelFunc
	// decode reads a record value (an aggregate.Decoder's Decode); tests
	// replace it to reach the recover.
	decode func([]byte) (aggregate.Input, error)
	// first is set while the group gives this instance the symbolized
	// topic's partition 0 (OwnsFirstPartition).
	first atomic.Bool
	// snaps are the snapshots each partition's commits name (the newest
	// stored).
	snaps map[int32]snapRef
	// seek holds the partitions restored from a snapshot, with the
	// committed offset they were restored over and the offset to go on
	// from (adjustOffsets), and stale those whose commit moved in between
	// (their restored state is dropped before their first record). Under
	// seekMu, not mu: adjustOffsets runs in the client's offset fetch,
	// which a commit made under mu may wait for.
	seekMu sync.Mutex
	seek   map[int32]seekTo
	stale  map[int32]bool
}

type seekTo struct{ committed, at int64 }

// OwnsFirstPartition says whether the group has given this instance the
// symbolized topic's partition 0: one instance of the group at a time, the
// one that runs the fleet-wide passes (lifecycle.Lifecycle.Leads).
func (r *Rollup) OwnsFirstPartition() bool { return r.first.Load() }

// owns records whether ps, just assigned (or taken away), hold partition 0.
func (r *Rollup) owns(ps []int32, assigned bool) {
	if slices.Contains(ps, 0) {
		r.first.Store(assigned)
	}
}

// New builds a Rollup writing through w.
func New(cfg Config, w Writer, log *slog.Logger, reg prometheus.Registerer) *Rollup {
	if cfg.MaxPollRecords <= 0 {
		cfg.MaxPollRecords = 1000
	}
	if cfg.FlushTimeout <= 0 {
		cfg.FlushTimeout = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Limits == (record.Limits{}) {
		cfg.Limits = record.DefaultLimits()
	}
	r := &Rollup{cfg: cfg, w: w, log: log, m: newMetrics(reg), parts: map[int32]*aggregate.Partition{}, active: map[int32]time.Time{}, writing: map[int32]*hourWrite{}, hourSlot: make(chan struct{}, 1),
		snaps: map[int32]snapRef{}, seek: map[int32]seekTo{}, stale: map[int32]bool{}}
	r.decode = aggregate.NewDecoder(cfg.Limits).Decode
	return r
}

// A fetch waits until the broker holds fetchMinBytes for it (about 120
// profiles of 8-core hosts) or fetchMaxWait passed.
const (
	fetchMinBytes = 1 << 20
	fetchMaxWait  = time.Second
)

// ClientOpts are the consumer options the Kafka client needs.
func (r *Rollup) ClientOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumerGroup(r.cfg.Group),
		kgo.ConsumeTopics(r.cfg.Topics.ProfilesSymbolized),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		// Fetch in batches: a window is written once it closes, minutes
		// after its records (STACKSTREAM_ROLLUP_ALLOWED_LATENESS), so a
		// second of waiting for more records costs nothing users see. A
		// broker answering each fetch as soon as one record came made an
		// instance with a small share of the fleet flush and commit every
		// 2-3 records (15 commits a second at 40 records a second), and
		// its CPU per record grow with the instances (docs/ROLLUP.md,
		// "Fetching in batches").
		kgo.FetchMinBytes(fetchMinBytes),
		kgo.FetchMaxWait(fetchMaxWait),
		// Records are only handed out between rebalances, so a revoke
		// always sees the state of every record processed.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(r.assigned),
		kgo.AdjustFetchOffsetsFn(r.adjustOffsets),
		kgo.OnPartitionsRevoked(r.revoked),
		kgo.OnPartitionsLost(r.lost),
	}
}

// Run consumes until ctx ends, then writes every window still in memory
// (open ones too, so OpenSearch holds the freshest sums) and commits what is
// safe. cl must have been built with ClientOpts; the caller closes it after
// Run returns.
func (r *Rollup) Run(ctx context.Context, cl *kgo.Client) error {
	r.mu.Lock()
	r.cl = cl
	r.mu.Unlock()
	for {
		pollCtx, cancel := context.WithCancel(ctx)
		if r.cfg.IdleFlush > 0 {
			// Wake up now and then to write idle partitions.
			pollCtx, cancel = context.WithTimeout(ctx, min(max(r.cfg.IdleFlush/2, 100*time.Millisecond), 5*time.Second))
		}
		r.mu.Lock()
		r.wake = cancel
		for _, hw := range r.writing {
			select {
			case <-hw.finished:
				cancel() // ended since the last flush
			default:
			}
		}
		r.mu.Unlock()
		fetches := cl.PollRecords(pollCtx, r.cfg.MaxPollRecords)
		cancel()
		if fetches.IsClientClosed() || ctx.Err() != nil {
			// Records returned with a cancelled poll are left for the
			// next owner; the rebalance they block must not outlive us,
			// or leaving the group on Close waits forever.
			cl.AllowRebalance()
			break
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				r.log.Warn("fetch", "topic", topic, "partition", p, "err", err)
			}
		})
		r.mu.Lock()
		err := r.endedWrites()
		if err == nil {
			err = r.handle(ctx, fetches)
		}
		if err == nil {
			err = r.flushIdle(ctx)
		}
		r.mu.Unlock()
		cl.AllowRebalance()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
	}
	return r.shutdown()
}

func (r *Rollup) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.FlushTimeout)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	// Whatever the flush did, it was the last write: what it did not store
	// is not committed, and the next owner reads it again.
	defer func() { r.stopping = true }()
	ids := make([]int32, 0, len(r.writing))
	for id := range r.writing {
		ids = append(ids, id)
	}
	r.awaitWrites(ctx, ids)
	werr := r.endedWrites()
	if err := errors.Join(werr, r.flush(ctx, r.parts, nil, true, true)); err != nil {
		return fmt.Errorf("flush on shutdown: %w", err)
	}
	r.log.Info("flushed on shutdown", "partitions", len(r.parts))
	return nil
}

// handle folds a batch of records into the windows, then writes and commits.
// A record that ends an hour (its time passes the hour's end) starts the
// write of that hour in the background (hourwrite.go) while the rest of the
// batch, the next hour's first profiles, is folded in beside it; the hour
// is frozen (aggregate.Partition.HoldsEndedHour) by the first flush after
// it is stored.
func (r *Rollup) handle(ctx context.Context, fetches kgo.Fetches) error {
	var dlq []*kgo.Record
	var err error
	fetches.EachPartition(func(ft kgo.FetchTopicPartition) {
		if len(ft.Records) == 0 || err != nil {
			return
		}
		r.dropStale(ft.Partition)
		part := r.partition(ctx, ft.Partition)
		r.active[ft.Partition] = r.cfg.Now()
		for _, rec := range ft.Records {
			if d := r.process(ctx, part, rec); d != nil {
				dlq = append(dlq, d)
			}
			if part.HoldsEndedHour() {
				if err = r.writeEndedHour(ctx, ft.Partition, part); err != nil {
					return
				}
			}
		}
		last := ft.Records[len(ft.Records)-1]
		r.m.SetLag(ft.Partition, ft.HighWatermark, last.Offset)
		r.m.watermark.WithLabelValues(strconv.Itoa(int(ft.Partition))).Set(float64(part.Watermark().UnixNano()) / 1e9)
	})
	if err != nil {
		return err
	}
	return r.flush(ctx, r.parts, dlq, false, false)
}

// flushIdle writes every window of the partitions idle for IdleFlush.
func (r *Rollup) flushIdle(ctx context.Context) error {
	if r.cfg.IdleFlush <= 0 {
		return nil
	}
	idle := map[int32]*aggregate.Partition{}
	for id, p := range r.parts {
		if last, ok := r.active[id]; ok && r.cfg.Now().Sub(last) >= r.cfg.IdleFlush {
			idle[id] = p
		}
	}
	if len(idle) == 0 {
		return nil
	}
	return r.flush(ctx, idle, nil, true, false)
}

// process folds one record in, or returns the DLQ record for it. A record
// is a fault boundary: a panic while processing it (none is known: each
// cause found was fixed where it arose) sends it to the DLQ with reason
// "panic", counted by stackstream_rollup_panics_total, and the loop goes on.
func (r *Rollup) process(ctx context.Context, part *aggregate.Partition, rec *kgo.Record) (dlq *kgo.Record) {
	toDLQ := func(reason string, err error) *kgo.Record {
		part.Advance(rec.Offset)
		r.m.Records.WithLabelValues("dlq").Inc()
		r.m.DLQ.WithLabelValues(reason).Inc()
		r.log.Warn("record to dlq", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "reason", reason, "err", err)
		return record.DLQRecord(r.cfg.Topics.DLQ, ServiceName, rec, err)
	}
	defer func() {
		if v := recover(); v != nil {
			r.m.panics.Inc()
			r.log.Error("panic processing record", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "panic", v, "stack", string(debug.Stack()))
			dlq = toDLQ("panic", fmt.Errorf("process record: panic: %v", v))
		}
	}()
	meta, err := record.ParseMeta(rec.Headers)
	if err != nil {
		return toDLQ("headers", fmt.Errorf("parse headers: %w", err))
	}
	in, err := r.decode(rec.Value)
	if err != nil {
		return toDLQ(decodeReason(err), fmt.Errorf("decode profile: %w", err))
	}
	in.Type, in.Host, in.Offset, in.Fallback = meta.Type, record.Host(meta, rec.Key), rec.Offset, rec.Timestamp
	out, err := part.Add(in)
	if errors.Is(err, aggregate.ErrStateFull) && r.relieve(ctx) {
		// Add refused it whole: folding it again is its first time.
		out, err = part.Add(in)
	}
	switch {
	case errors.Is(err, record.ErrTimeOutOfRange):
		return toDLQ("time_out_of_range", fmt.Errorf("aggregate profile: %w (the window is STACKSTREAM_ROLLUP_MAX_AGE=%s back, STACKSTREAM_ROLLUP_MAX_CLOCK_SKEW=%s ahead)",
			err, r.cfg.Window.MaxAge, r.cfg.Window.MaxClockSkew))
	case errors.Is(err, aggregate.ErrStateFull):
		return toDLQ("state_full", fmt.Errorf("aggregate profile: %w (windows in memory: raise STACKSTREAM_ROLLUP_MAX_STATE_BYTES or spread the partitions over more instances; replay the rollup group from before it to include it)", err))
	case err != nil:
		return toDLQ("profile", fmt.Errorf("aggregate profile: %w", err))
	case out == aggregate.TooLate:
		return toDLQ("too_late", fmt.Errorf("too late: profile at %s is older than watermark %s minus allowed lateness %s and retention %s; not counted (replay the rollup group from before it to include it)",
			time.Unix(0, in.TimeNanos()).UTC().Format(time.RFC3339Nano), part.Watermark().Format(time.RFC3339), r.cfg.Window.AllowedLateness, r.cfg.Window.Retention))
	case out == aggregate.Skipped:
		r.m.Records.WithLabelValues("skipped").Inc()
	default:
		r.m.Records.WithLabelValues("added").Inc()
	}
	return nil
}

// decodeReason is the DLQ reason and metric label of a decode error.
func decodeReason(err error) string {
	switch {
	case errors.Is(err, record.ErrTooLarge):
		return "too_large"
	case errors.Is(err, record.ErrInvalidProfile):
		return "invalid_profile"
	}
	return "decode"
}

// flush sends the DLQ records, writes the pending documents of parts (all of
// them when all), evicts, and commits what is safe, with a snapshot of
// each partition when one is due or the partitions are handed over
// (final). Nothing is committed unless every earlier step succeeded. A
// partition with an hour in flight (or whose hour write failed) is left
// alone (hourwrite.go).
func (r *Rollup) flush(ctx context.Context, parts map[int32]*aggregate.Partition, dlq []*kgo.Record, all, final bool) error {
	if r.cl == nil {
		return nil
	}
	if err := r.produce(ctx, dlq); err != nil {
		return err
	}
	ready := make(map[int32]*aggregate.Partition, len(parts))
	for id, p := range parts {
		if r.writing[id] == nil {
			ready[id] = p
		}
	}
	// Built, encoded and written a chunk at a time, each chunk marked
	// stored once written: the documents of a whole flush (every
	// 10-minute partition tree and hour tree of a partition, at fleet
	// scale) were as large as the window state, and its JSON as large
	// again (docs/ROLLUP.md, "Flushing a chunk at a time"). A chunk not
	// written stays dirty, and nothing is committed.
	for id, p := range ready {
		f := p.Flush(all)
		for docs := f.Next(flushChunkBytes); len(docs) > 0; docs = f.Next(flushChunkBytes) {
			if err := r.store(ctx, id, docs, r.produce); err != nil {
				return err
			}
			aggregate.MarkStored(docs)
		}
	}
	return r.commit(ctx, ready, final)
}

// flushChunkBytes bounds the documents a flush or an hour write builds
// and encodes at once (a variable for tests that write in many chunks).
var flushChunkBytes = 16 << 20

// store writes docs of partition id, a bulk request of up to
// flushChunkBytes at a time, and hands the DLQ records of the documents
// OpenSearch rejected to produce. It touches no state of r: the hour
// writes call it outside r.mu.
func (r *Rollup) store(ctx context.Context, id int32, docs []aggregate.Pending, produce func(context.Context, []*kgo.Record) error) error {
	for len(docs) > 0 {
		n, rejected, err := r.write(ctx, id, docs)
		if err != nil {
			return err
		}
		if err := produce(ctx, rejected); err != nil {
			return err
		}
		docs = docs[n:]
	}
	return nil
}

// write encodes pending documents until flushChunkBytes and writes them; it
// returns how many it took and the DLQ records of those OpenSearch
// rejected.
func (r *Rollup) write(ctx context.Context, partition int32, pending []aggregate.Pending) (int, []*kgo.Record, error) {
	var items []bulk.Item
	byID := map[string]int{}
	// Documents are appended into 1 MiB chunks: one allocation per
	// thousands of documents, and no doubling copy of a big flush.
	var buf []byte
	size := 0
	for i := range pending {
		if size >= flushChunkBytes {
			break
		}
		if cap(buf)-len(buf) < 4096 {
			buf = make([]byte, 0, 1<<20)
		}
		start := len(buf)
		var err error
		if buf, err = pending[i].AppendJSON(buf); err != nil {
			return 0, nil, fmt.Errorf("encode rollup document: %w", err)
		}
		d := &pending[i]
		items = append(items, bulk.Item{Index: d.Index, ID: d.ID, Doc: buf[start:len(buf):len(buf)]})
		byID[d.Index+"/"+d.ID] = i
		size += len(buf) - start
	}
	n := len(items)
	start := time.Now()
	rejected, err := r.w.Write(ctx, items)
	if err != nil {
		return 0, nil, fmt.Errorf("write rollups: %w", err)
	}
	r.m.writeSeconds.Observe(time.Since(start).Seconds())
	r.m.docs.Add(float64(n - len(rejected)))
	var bad []*kgo.Record
	for _, rj := range rejected {
		bad = append(bad, r.rejectedRecord(partition, pending[byID[rj.Item.Index+"/"+rj.Item.ID]], rj))
	}
	return n, bad, nil
}

// rejectedRecord is the DLQ record of a document OpenSearch refused: the
// document itself, with the coordinates of the first record behind it.
func (r *Rollup) rejectedRecord(partition int32, d aggregate.Pending, rj bulk.Rejected) *kgo.Record {
	r.m.DLQ.WithLabelValues("rejected_document").Inc()
	r.log.Warn("document rejected", "index", rj.Item.Index, "id", rj.Item.ID, "status", rj.Status, "reason", rj.Reason, "partition", partition, "offset", d.Offset)
	orig := &kgo.Record{
		Topic: r.cfg.Topics.ProfilesSymbolized, Partition: partition, Offset: d.Offset,
		Key: []byte(d.Doc.Host), Value: rj.Item.Doc,
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/json")}},
	}
	return record.DLQRecord(r.cfg.Topics.DLQ, ServiceName, orig,
		fmt.Errorf("opensearch rejected rollup document %s/%s: HTTP %d: %s", rj.Item.Index, rj.Item.ID, rj.Status, rj.Reason))
}

// produce sends recs, after any left unsent by an earlier failure.
func (r *Rollup) produce(ctx context.Context, recs []*kgo.Record) error {
	recs = append(r.unsent, recs...)
	r.unsent = nil
	if len(recs) == 0 {
		return nil
	}
	var failed []*kgo.Record
	var firstErr error
	for _, res := range r.cl.ProduceSync(ctx, recs...) {
		if res.Err != nil {
			// kgo produces a record under the context it was first given:
			// one that failed because that context ended would fail again
			// at every retry, the final flush's too.
			res.Record.Context = nil
			failed = append(failed, res.Record)
			if firstErr == nil {
				firstErr = res.Err
			}
		}
	}
	if firstErr != nil {
		r.unsent = failed
		return fmt.Errorf("produce to dlq %s: %w", r.cfg.Topics.DLQ, firstErr)
	}
	return nil
}

// commit evicts windows past retention and commits each partition's safe
// offset with its checkpoint as metadata, and the snapshot of its state
// taken now (when one is due, or final) or before.
func (r *Rollup) commit(ctx context.Context, parts map[int32]*aggregate.Partition, final bool) error {
	topic := r.cfg.Topics.ProfilesSymbolized
	offsets := map[int32]kgo.EpochOffset{}
	cps := map[int32]aggregate.Checkpoint{}
	meta := map[int32]string{}
	saved := map[int32]snapRef{}
	open := 0
	for id, p := range parts {
		p.Evict()
		open += p.OpenWindows()
		off, cp, ok := p.Commit()
		if s := r.cfg.Snapshots; s != nil && s.due(id, r.cfg.Now(), final) && r.snaps[id].stale(p) {
			if o, c, safe := p.Safe(); safe {
				ref, err := r.snapshot(ctx, id, p)
				if err != nil {
					r.log.Warn("snapshot", "partition", id, "err", err)
				} else {
					off, cp, ok = o, c, true
					saved[id] = ref
				}
			}
		}
		if ok {
			offsets[id] = kgo.EpochOffset{Epoch: -1, Offset: off}
			cps[id] = cp
			meta[id] = cp.String()
			if ref, has := saved[id]; has {
				meta[id] += ref.String()
			} else if ref, has := r.snaps[id]; has {
				meta[id] += ref.String()
			}
		}
	}
	if len(parts) == len(r.parts) { // a revoke sees only some partitions
		r.m.openWindows.Set(float64(open))
	}
	if b := r.cfg.Window.Budget; b != nil {
		r.m.stateBytes.Set(float64(b.Used()))
		r.m.cacheBytes.Set(float64(b.CacheBytes()))
		r.m.observeCache(b.CacheStats())
	}
	if len(offsets) == 0 {
		return nil
	}
	withMeta := kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			for j := range req.Topics[i].Partitions {
				rp := &req.Topics[i].Partitions[j]
				if m, ok := meta[rp.Partition]; ok && req.Topics[i].Topic == topic {
					rp.Metadata = &m
				}
			}
		}
		return nil
	})
	var cerr error
	start := time.Now()
	defer func() { r.m.CommitSeconds.Observe(time.Since(start).Seconds()) }()
	r.cl.CommitOffsetsSync(withMeta, map[string]map[int32]kgo.EpochOffset{topic: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				cerr = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
						cerr = errors.Join(cerr, fmt.Errorf("partition %d: %w", p.Partition, err))
						delete(offsets, p.Partition)
					}
				}
			}
		})
	for id, eo := range offsets {
		if p := parts[id]; p != nil && cerr == nil {
			p.Committed(eo.Offset, cps[id])
			if ref, ok := saved[id]; ok {
				r.snaps[id] = ref
				if err := r.cfg.Snapshots.trim(ctx, id, ref); err != nil {
					r.log.Warn("delete older snapshots", "partition", id, "err", err)
				}
			}
		}
	}
	if cerr != nil {
		// A commit refused after a rebalance is harmless: the next owner
		// reads again from the last commit and rebuilds the windows.
		r.m.commitErrors.Inc()
		r.log.Warn("commit offsets", "topic", topic, "err", cerr)
		return nil
	}
	r.m.commits.Inc()
	r.log.Debug("committed", "topic", topic, "offsets", offsets)
	return nil
}

// windowConfig is the window configuration of partition p.
func (r *Rollup) windowConfig(p int32) aggregate.Config {
	cfg := r.cfg.Window
	cfg.Partition = p
	return cfg
}

// partition returns the state of p, creating it from the committed
// checkpoint if the assignment callback has not.
func (r *Rollup) partition(ctx context.Context, p int32) *aggregate.Partition {
	if part := r.parts[p]; part != nil {
		return part
	}
	cps := r.checkpoints(ctx, []int32{p})
	part := aggregate.NewPartition(r.windowConfig(p), cps[p].cp)
	r.parts[p] = part
	return part
}

// committed is what a partition's commit holds: its offset, checkpoint,
// and the snapshot it names (snap.chunks is 0 when none).
type committed struct {
	offset int64
	cp     aggregate.Checkpoint
	snap   snapRef
}

// checkpoints reads the metadata committed with the group's offsets.
func (r *Rollup) checkpoints(ctx context.Context, partitions []int32) map[int32]committed {
	out := map[int32]committed{}
	if r.cl == nil {
		return out
	}
	resps, err := kadm.NewClient(r.cl).FetchOffsets(ctx, r.cfg.Group)
	if err != nil {
		// Without the checkpoint the watermark restarts from the records
		// read again; windows still rebuild from whole input, only the
		// too-late decisions for very late records may differ.
		r.log.Warn("fetch committed checkpoints", "group", r.cfg.Group, "err", err)
		return out
	}
	for _, p := range partitions {
		if o, ok := resps.Lookup(r.cfg.Topics.ProfilesSymbolized, p); ok && o.Err == nil {
			if cp, ok := aggregate.ParseCheckpoint(o.Metadata); ok {
				c := committed{offset: o.At, cp: cp}
				c.snap, _ = parseSnapRef(o.Metadata)
				out[p] = c
			}
		}
	}
	return out
}

func (r *Rollup) assigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cl = cl
	ps := assigned[r.cfg.Topics.ProfilesSymbolized]
	cps := r.checkpoints(ctx, ps)
	for _, p := range ps {
		if old := r.parts[p]; old != nil {
			old.Release()
		}
		delete(r.writing, p) // a failed write's: the state it kept is gone
		delete(r.snaps, p)
	}
	restored := r.restore(ctx, ps, cps)
	for _, p := range ps {
		if part := restored[p]; part != nil {
			r.parts[p] = part
			continue
		}
		r.parts[p] = aggregate.NewPartition(r.windowConfig(p), cps[p].cp)
	}
	r.owns(ps, true)
	r.log.Info("partitions assigned", "topic", r.cfg.Topics.ProfilesSymbolized, "partitions", ps)
}

// revoked writes what the revoked partitions hold and commits what is
// stored, so the next owner starts as late as is safe.
func (r *Rollup) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ps := revoked[r.cfg.Topics.ProfilesSymbolized]
	parts := map[int32]*aggregate.Partition{}
	for _, p := range ps {
		if part := r.parts[p]; part != nil {
			parts[p] = part
		}
	}
	if !r.stopping {
		// The callback's context ends when the client closes; the final
		// write still deserves its bounded time.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.FlushTimeout)
		r.awaitWrites(ctx, ps)
		// With snapshots the next owner goes on from the state as it is:
		// writing the windows still open (the hour in progress among
		// them) would only be done again by it, and make the rebalance
		// wait for the write.
		all := r.cfg.Snapshots == nil
		if err := errors.Join(r.endedWrites(), r.flush(ctx, parts, nil, all, true)); err != nil {
			r.log.Warn("flush revoked partitions", "partitions", ps, "err", err)
		}
		cancel()
	}
	for _, p := range ps {
		r.drop(p)
		r.m.ForgetPartition(p)
		r.m.watermark.DeleteLabelValues(strconv.Itoa(int(p)))
	}
	r.owns(ps, false)
	r.log.Info("partitions revoked", "topic", r.cfg.Topics.ProfilesSymbolized, "partitions", ps)
}

// lost drops state without committing: another member owns the partitions.
func (r *Rollup) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Another member rebuilds the hours being written: a write of ours
	// landing after its own would put older sums back.
	r.cancelWrites(lost[r.cfg.Topics.ProfilesSymbolized])
	for _, p := range lost[r.cfg.Topics.ProfilesSymbolized] {
		r.drop(p)
	}
	r.owns(lost[r.cfg.Topics.ProfilesSymbolized], false)
	r.log.Warn("partitions lost", "topic", r.cfg.Topics.ProfilesSymbolized, "partitions", lost[r.cfg.Topics.ProfilesSymbolized])
}

// snapshot stores partition p's state (snapshots.go).
func (r *Rollup) snapshot(ctx context.Context, id int32, p *aggregate.Partition) (snapRef, error) {
	start := time.Now()
	data := p.Snapshot(nil)
	ref, err := r.cfg.Snapshots.save(ctx, id, data, p.SnapshotAt(), r.cfg.Now())
	if err != nil {
		return snapRef{}, err
	}
	ref.built = p.DocumentsBuilt()
	r.m.snapshotSeconds.Observe(time.Since(start).Seconds())
	r.m.snapshotBytes.Add(float64(len(data)))
	r.log.Debug("snapshot", "partition", id, "bytes", len(data), "chunks", ref.chunks, "at", ref.at)
	return ref, nil
}

// restore is the state of partitions ps restored from the snapshots their
// commits name, read together; a partition without one, or whose
// snapshot cannot be read, is left out (it is read again from the
// committed offset). The consumer goes on from each snapshot's offset
// (adjustOffsets).
func (r *Rollup) restore(ctx context.Context, ps []int32, cps map[int32]committed) map[int32]*aggregate.Partition {
	out := map[int32]*aggregate.Partition{}
	s := r.cfg.Snapshots
	if s == nil {
		return out
	}
	refs := map[int32]snapRef{}
	for _, p := range ps {
		c := cps[p]
		switch {
		case c.snap.chunks == 0:
		case c.snap.at < c.offset:
			r.log.Warn("snapshot older than the commit: reading again from the commit", "partition", p, "snapshot_at", c.snap.at, "committed", c.offset)
		default:
			refs[p] = c.snap
		}
	}
	if len(refs) == 0 {
		return out
	}
	start := time.Now()
	data, errs := s.load(ctx, refs)
	loaded := time.Since(start)
	for _, p := range ps {
		if _, ok := refs[p]; !ok {
			continue
		}
		c, err := cps[p], errs[p]
		var part *aggregate.Partition
		if err == nil {
			part, err = aggregate.Restore(r.windowConfig(p), data[p])
		}
		if err != nil {
			r.m.restores.WithLabelValues("failed").Inc()
			r.log.Warn("snapshot not restored: reading again from the commit", "partition", p, "committed", c.offset, "err", err)
			continue
		}
		r.m.restores.WithLabelValues("restored").Inc()
		r.seekMu.Lock()
		r.seek[p] = seekTo{committed: c.offset, at: c.snap.at}
		delete(r.stale, p)
		r.seekMu.Unlock()
		r.snaps[p] = c.snap
		r.log.Info("partition restored from its snapshot", "partition", p, "bytes", len(data[p]), "committed", c.offset, "from", c.snap.at,
			"read_seconds", loaded.Seconds(), "partitions_read", len(refs))
		out[p] = part
		delete(data, p) // its bytes are garbage once restored
	}
	return out
}

// adjustOffsets moves the partitions restored from a snapshot to the
// offset after it. A partition whose committed offset changed since it
// was restored (offsets reset by hand between the two reads) reads from
// that commit, its restored state marked stale (dropStale).
func (r *Rollup) adjustOffsets(_ context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	r.seekMu.Lock()
	defer r.seekMu.Unlock()
	topic := r.cfg.Topics.ProfilesSymbolized
	for p, o := range offs[topic] {
		to, ok := r.seek[p]
		if !ok {
			continue
		}
		delete(r.seek, p)
		if o.EpochOffset().Offset != to.committed {
			r.log.Warn("committed offset moved while restoring: reading from the commit", "partition", p, "restored_over", to.committed, "committed", o.EpochOffset().Offset)
			r.stale[p] = true
			continue
		}
		offs[topic][p] = kgo.NewOffset().At(to.at)
	}
	return offs, nil
}

// dropStale drops the state of partition p when it was restored over a
// commit that has moved since (adjustOffsets): partition then starts it
// from the commit now.
func (r *Rollup) dropStale(p int32) {
	r.seekMu.Lock()
	stale := r.stale[p]
	r.seekMu.Unlock()
	if stale {
		r.drop(p)
	}
}

// drop releases partition p's state and forgets what is kept for it.
func (r *Rollup) drop(p int32) {
	if part := r.parts[p]; part != nil {
		part.Release()
	}
	delete(r.parts, p)
	delete(r.active, p)
	delete(r.writing, p)
	delete(r.snaps, p)
	r.seekMu.Lock()
	delete(r.seek, p)
	delete(r.stale, p)
	r.seekMu.Unlock()
}

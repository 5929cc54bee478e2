package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/services/rollup/internal/aggregate"
)

// An ended hour is written in the background (docs/ROLLUP.md, "Writing the
// ended hour"): written in the loop, the hour of 500 hosts stopped
// consumption for as long as OpenSearch took to store it, and the lag
// passed its bound at every hour boundary. At most one hour per partition
// is in flight. While it is, the partition's other documents wait, and it
// is neither evicted, frozen nor committed: a late profile of the hour
// makes what it changes dirty again, written once the hour is stored, so
// no write of the hour can land after a newer one and no offset passes a
// contribution not stored. A write that fails leaves its partition
// uncommitted for good: the next owner reads it again from the last
// commit.

// hourWrite is one partition's ended hour being stored.
type hourWrite struct {
	hour     time.Time
	cancel   context.CancelFunc
	finished chan struct{} // closed once err is set
	err      error
}

// startHourWrite stores h in the background. Called with r.mu held.
func (r *Rollup) startHourWrite(id int32, h *aggregate.HourWrite) {
	ctx, cancel := context.WithCancel(context.Background())
	hw := &hourWrite{hour: h.Hour(), cancel: cancel, finished: make(chan struct{})}
	r.writing[id] = hw
	r.m.hourWrites.Inc()
	cl := r.cl
	go func() {
		start := time.Now()
		// One hour stored at a time per instance: the partitions' hours
		// end together, and written at once each held its chunks, its
		// requests and its unfrozen hour for as long as all took.
		select {
		case r.hourSlot <- struct{}{}:
			hw.err = r.storeHour(ctx, cl, id, h)
			<-r.hourSlot
		case <-ctx.Done():
			hw.err = ctx.Err()
		}
		cancel()
		r.m.hourWrites.Dec()
		if hw.err == nil {
			r.m.hourWriteSeconds.Observe(time.Since(start).Seconds())
			r.log.Info("ended hour stored", "partition", id, "hour", hw.hour, "seconds", time.Since(start).Seconds())
		}
		close(hw.finished)
		r.mu.Lock()
		if r.wake != nil {
			r.wake()
		}
		r.mu.Unlock()
	}()
}

// storeHour writes the hour a chunk at a time: each is built under r.mu
// (the loop folds records between chunks) and encoded and written without
// it.
func (r *Rollup) storeHour(ctx context.Context, cl *kgo.Client, id int32, h *aggregate.HourWrite) error {
	produce := func(ctx context.Context, recs []*kgo.Record) error {
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("produce to dlq %s: %w", r.cfg.Topics.DLQ, err)
		}
		return nil
	}
	for {
		r.mu.Lock()
		docs := h.Next(flushChunkBytes)
		r.mu.Unlock()
		if len(docs) == 0 {
			return nil
		}
		if err := r.store(ctx, id, docs, produce); err != nil {
			return err
		}
	}
}

// writeEndedHour starts the write of an hour of partition id that has
// ended; when the partition's last hour is still in flight, it waits for
// it first (a write of an hour is that slow only when OpenSearch is).
// Called with r.mu held.
func (r *Rollup) writeEndedHour(ctx context.Context, id int32, part *aggregate.Partition) error {
	var after time.Time
	if hw := r.writing[id]; hw != nil {
		after = hw.hour
	}
	h := part.EndedHour(after)
	if h == nil {
		return nil
	}
	if r.writing[id] != nil {
		r.awaitWrites(ctx, []int32{id})
		if err := r.endedWrites(); err != nil {
			return err
		}
	}
	r.startHourWrite(id, h)
	return nil
}

// awaitWrites waits until the hour writes of ids end, cancelling them once
// ctx ends. Called with r.mu held, which it gives up while it waits: the
// writes need it between chunks.
func (r *Rollup) awaitWrites(ctx context.Context, ids []int32) {
	for _, id := range ids {
		hw := r.writing[id]
		if hw == nil {
			continue
		}
		r.mu.Unlock()
		select {
		case <-hw.finished:
		case <-ctx.Done():
			hw.cancel()
			<-hw.finished
		}
		r.mu.Lock()
	}
}

// endedWrites forgets the hour writes that succeeded, so that their
// partitions are flushed and committed again, and returns the errors of
// those that failed (they stay, and keep their partitions uncommitted).
// Called with r.mu held.
func (r *Rollup) endedWrites() error {
	var errs error
	for id, hw := range r.writing {
		select {
		case <-hw.finished:
		default:
			continue
		}
		if hw.err != nil {
			errs = errors.Join(errs, fmt.Errorf("write hour %s of partition %d: %w", hw.hour.Format(time.RFC3339), id, hw.err))
			continue
		}
		delete(r.writing, id)
	}
	return errs
}

// relieve waits for every hour in flight and freezes those stored, when a
// profile found the state full: the next hour's first profiles bring new
// stacks for every host while the ended hour is held whole. It reports
// whether there was any to wait for. Called with r.mu held.
func (r *Rollup) relieve(ctx context.Context) bool {
	if len(r.writing) == 0 {
		return false
	}
	ids := make([]int32, 0, len(r.writing))
	for id := range r.writing {
		ids = append(ids, id)
	}
	r.awaitWrites(ctx, ids)
	_ = r.endedWrites() // a failure is Run's to return
	for _, id := range ids {
		if part := r.parts[id]; part != nil && r.writing[id] == nil {
			// Stored: dropping and freezing it commits nothing.
			part.Evict()
		}
	}
	return true
}

// cancelWrites stops the hour writes of ids and waits for them to end.
// Called with r.mu held.
func (r *Rollup) cancelWrites(ids []int32) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.awaitWrites(ctx, ids)
}

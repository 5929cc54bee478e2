package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/services/symbolizer/internal/symbolize"
)

// txnTimeout is the broker's bound on one transaction: past it the broker
// aborts the transaction itself.
const txnTimeout = 60 * time.Second

// endTimeout bounds ending one transaction. Shutdown does not cancel it: a
// batch that was produced is committed or aborted, never left hanging until
// the broker's transaction timeout. It is the transaction timeout itself:
// ending waits out a rebalance that waits for a crashed member's session
// to expire (45 s by default), and giving up sooner stopped a healthy
// instance whenever another one was killed (services/ctl/bench part E).
const endTimeout = txnTimeout

// Runner polls profiles.raw in a group transact session and, per poll,
// produces every output record and commits the consumed offsets in one
// transaction: a crash before the commit aborts the whole batch, which the
// group then hands out again, so output is neither lost nor duplicated for
// consumers reading committed records.
type Runner struct {
	Session        *kgo.GroupTransactSession
	Processor      *Processor
	Metrics        *Metrics
	Log            *slog.Logger
	MaxPollRecords int
	// BatchLookupBudget bounds the time all records of one poll wait for
	// lookups together; past it the rest of the poll is symbolized from
	// what is cached. 0 means no bound but each record's own.
	BatchLookupBudget time.Duration
}

// Run processes until ctx ends or a transaction cannot be ended.
func (r *Runner) Run(ctx context.Context) error {
	for {
		fetches := r.Session.PollRecords(ctx, r.MaxPollRecords)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return nil
		}
		// franz-go retries fetch errors itself; they are worth a line, not
		// a stop.
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				r.Log.Warn("fetch", "topic", topic, "partition", p, "err", err)
			}
		})
		if fetches.NumRecords() == 0 {
			continue
		}
		if err := r.batch(ctx, fetches); err != nil {
			return err
		}
	}
}

// batch runs one transaction over the records of one poll. Records are
// symbolized before the transaction begins: a slow debuginfod download then
// holds no transaction open, and cannot run into the transaction timeout.
func (r *Runner) batch(ctx context.Context, fetches kgo.Fetches) error {
	var (
		results    = make([]Result, 0, fetches.NumRecords())
		stats      symbolize.Stats
		dlq        = map[string]int{}
		symbolized int
		split      int // inputs written as several parts
		parts      int // records those parts took
	)
	// Lookups of the whole poll share a budget, so a poll full of records
	// naming unknown binaries holds its partitions for one budget, not one
	// per record. ctx alone says whether the instance is stopping.
	lookupCtx, cancel := ctx, context.CancelFunc(func() {})
	if r.BatchLookupBudget > 0 {
		lookupCtx, cancel = context.WithTimeout(ctx, r.BatchLookupBudget)
	}
	defer cancel()
	fetches.EachRecord(func(rec *kgo.Record) {
		if ctx.Err() != nil {
			return
		}
		res := r.Processor.Process(lookupCtx, rec)
		if res.Err != nil {
			r.Log.Warn("send record to dlq", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "reason", res.Err)
			dlq[res.Reason]++
		}
		if res.Parts > 0 {
			symbolized++
			stats.Add(res.Stats)
			if res.Parts > 1 {
				split++
				parts += res.Parts
			}
		}
		results = append(results, res)
	})
	if ctx.Err() != nil {
		// Shutting down mid-batch: a source lookup may have been cut short,
		// so nothing of this batch is written. Its offsets stay uncommitted
		// and whoever owns the partitions next redoes it.
		return nil
	}

	if err := r.Session.Begin(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	var (
		mu         sync.Mutex
		produceErr error
	)
	promise := func(rec *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if produceErr == nil {
				produceErr = fmt.Errorf("produce to %s: %w", rec.Topic, err)
			}
			mu.Unlock()
		}
	}
	for _, res := range results {
		for _, out := range res.Out {
			// Not ctx: a shutdown must not cut a batch half way; End
			// decides the batch's fate.
			r.Session.Produce(context.Background(), out, promise)
		}
	}

	endCtx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	mu.Lock()
	commit := produceErr == nil
	mu.Unlock()
	endStart := time.Now()
	committed, err := r.Session.End(endCtx, kgo.TransactionEndTry(commit))
	r.Metrics.CommitSeconds.Observe(time.Since(endStart).Seconds())
	if err != nil {
		if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
			return fmt.Errorf("end transaction: %w: another process started with this instance's transactional ID; give every instance its own STACKSTREAM_SYMBOLIZER_TRANSACTIONAL_ID", err)
		}
		return fmt.Errorf("end transaction: %w", err)
	}
	mu.Lock()
	perr := produceErr
	mu.Unlock()
	if perr != nil {
		r.Metrics.Transactions.WithLabelValues("aborted").Inc()
		return perr
	}
	if !committed {
		// A rebalance took partitions away mid-batch: the session rewound to
		// the committed offsets, so whoever owns them now redoes the work.
		r.Metrics.Transactions.WithLabelValues("aborted").Inc()
		r.Log.Info("transaction aborted after a rebalance; the batch will be redone", "records", fetches.NumRecords())
		return nil
	}
	r.Metrics.Transactions.WithLabelValues("committed").Inc()
	r.Metrics.Records.WithLabelValues("symbolized").Add(float64(symbolized))
	r.Metrics.Split.Add(float64(split))
	r.Metrics.SplitParts.Add(float64(parts))
	for reason, n := range dlq {
		r.Metrics.Records.WithLabelValues("dlq").Add(float64(n))
		r.Metrics.DLQ.WithLabelValues(reason).Add(float64(n))
	}
	r.Metrics.addStats(stats)
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if n := len(p.Records); n > 0 {
			r.Metrics.SetLag(p.Partition, p.HighWatermark, p.Records[n-1].Offset)
		}
	})
	return nil
}

// SessionOpts are the client options of the group transact session on the
// raw topic: read committed, stable offsets, one transactional ID per
// instance, batches compressed with codec.
func SessionOpts(group, rawTopic, transactionalID string, sessionTimeout time.Duration, codec kgo.CompressionCodec) []kgo.Opt {
	if sessionTimeout <= 0 {
		sessionTimeout = 45 * time.Second
	}
	return []kgo.Opt{
		// How long a crashed instance keeps its partitions before the group
		// hands them to the others.
		kgo.SessionTimeout(sessionTimeout),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(rawTopic),
		// A new group starts at the beginning: nothing the agents already
		// wrote is skipped.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.TransactionalID(transactionalID),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.TransactionTimeout(txnTimeout),
		// Profiles are written as stored gzip (see Processor.Process): the
		// batch is what gets compressed.
		kgo.ProducerBatchCompression(codec),
	}
}

// DebuginfoOpts are the client options of the debuginfo follower: no
// group, from the start, values up to the topic's raised size limit, and
// transaction markers kept so the follower's position reaches the topic's
// end when a marker is the last record.
func DebuginfoOpts(topic string) []kgo.Opt {
	return []kgo.Opt{
		kgo.KeepControlRecords(),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxBytes(64 << 20),
		kgo.FetchMaxPartitionBytes(32 << 20),
	}
}

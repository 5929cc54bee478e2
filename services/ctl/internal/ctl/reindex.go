package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/replay"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// ReindexOptions say how to build and swap in a new index generation.
type ReindexOptions struct {
	// IndexerGroup and RollupGroup are the live consumer groups; their
	// temporary twins (<group>.reindex-g<N>) fill the new generation. An
	// empty one is not refilled: its indices stay on their generation.
	IndexerGroup string
	RollupGroup  string
	// From is where the temporary groups start: the first record at or
	// after it (zero: the topic's first record).
	From time.Time
	// MaxLeft is how many records the temporary groups may have left when
	// the aliases swap; the rest is indexed after the swap.
	MaxLeft int64
	// DeleteOld deletes the old generation's indices after the swap. A
	// migration from generation 0 needs it: its indices carry the alias
	// names, so the swap itself deletes them.
	DeleteOld bool
	// Run starts the temporary consumers as child processes (Starter) and
	// stops them once the new generation serves; otherwise stackctl prints
	// how to start them and waits.
	Run      bool
	Starter  Starter
	Interval time.Duration // progress lines; default 5s
}

// Starter starts a temporary consumer: the binary of service ("indexer" or
// "rollup") with the environment env added. The consumer stops when stop
// is called; done is closed when it has exited, err then says why.
type Starter func(ctx context.Context, service string, env []string) (stop func() error, done <-chan struct{}, err func() error, startErr error)

// ReindexSummary is what a reindex did.
type ReindexSummary struct {
	From, To  int
	Groups    []string
	Processed int64
	Swap      opensearch.Swap
	Deleted   []string
	Gaps      Gaps              // what was copied or kept for lack of records in the topics
	Counts    map[int]DocCounts // documents per generation at the swap
	Elapsed   time.Duration
}

// Reindex fills a new index generation from the topics with temporary
// consumer groups while the live ones keep serving, swaps every alias to it
// in one request once the temporary groups have caught up, and with
// DeleteOld deletes the old generation. See docs/STACKCTL.md.
func Reindex(ctx context.Context, cfg Config, adm *kadm.Client, osc *opensearchapi.Client, opts ReindexOptions, out io.Writer) (ReindexSummary, error) {
	began := time.Now()
	names := cfg.Index.Names()
	topic := cfg.Kafka.Topics().ProfilesSymbolized
	var sum ReindexSummary

	// The templates must match the physical names of every generation
	// before a temporary consumer creates one.
	if _, err := opensearch.ApplyTemplates(ctx, osc, cfg.Index.Prefix, cfg.Index.Settings()); err != nil {
		return sum, fmt.Errorf("reindex: apply index templates: %w", err)
	}
	l, err := opensearch.ReadLayout(ctx, osc, names)
	if err != nil {
		return sum, fmt.Errorf("reindex: %w", err)
	}
	sum.From = l.Current(names)
	gens := l.Generations()
	sum.To = sum.From + 1
	if len(gens) > 0 && gens[len(gens)-1] > sum.From {
		sum.To = gens[len(gens)-1] // a reindex that did not finish: go on with it
		fmt.Fprintf(out, "generation %d exists already (%d indices) and does not serve: resuming it\n", sum.To, len(l.Of(sum.To)))
	}
	if sum.From == 0 && len(l.Of(0)) > 0 && !opts.DeleteOld {
		return sum, fmt.Errorf("reindex: the %d indices serving now are of generation 0 (physical indices carrying the names services use, from before index generations), so the swap has to delete them in the same request that makes the names aliases of generation %d: run again with --delete-old to accept that (see docs/STACKCTL.md, \"Migrating from generation 0\")", len(l.Of(0)), sum.To)
	}
	fmt.Fprintf(out, "serving generation %d; filling generation %d from %s\n", sum.From, sum.To, topic)

	type consumer struct{ service, live, group string }
	var consumers []consumer
	for _, c := range []consumer{{"indexer", opts.IndexerGroup, ""}, {"rollup", opts.RollupGroup, ""}} {
		if c.live == "" {
			fmt.Fprintf(out, "the %s is not refilled: its indices stay on their generation\n", c.service)
			continue
		}
		c.group = opensearch.ReindexGroup(c.live, sum.To)
		consumers = append(consumers, c)
		sum.Groups = append(sum.Groups, c.group)
	}
	if len(consumers) == 0 {
		return sum, errors.New("reindex: no group to refill: give --indexer-group or --rollup-group")
	}

	// A live group without offsets is most likely a wrong name: its
	// temporary twin could not be compared with it before the swap.
	for _, c := range consumers {
		live, err := replay.Positions(ctx, adm, c.live, topic)
		if err != nil {
			return sum, fmt.Errorf("reindex: %w", err)
		}
		if len(live) == 0 {
			return sum, fmt.Errorf("reindex: the live %s group %q has no committed offsets on %s: give its name with --%s-group (STACKSTREAM_%s_GROUP of the live %s), or \"\" to leave its indices as they are", c.service, c.live, topic, c.service, strings.ToUpper(c.service), c.service)
		}
	}

	// Each temporary group starts at From, unless a resumed one has
	// committed offsets already.
	from := opts.From
	if from.IsZero() {
		from = time.UnixMilli(0)
	}
	for _, c := range consumers {
		committed, err := adm.FetchOffsetsForTopics(ctx, c.group, topic)
		if err == nil {
			err = committed.Error()
		}
		if err != nil {
			return sum, fmt.Errorf("reindex: read offsets of %s: %w", c.group, err)
		}
		resumed := false
		committed.Each(func(o kadm.OffsetResponse) { resumed = resumed || o.At >= 0 })
		if resumed {
			fmt.Fprintf(out, "group %s: resuming at its committed offsets\n", c.group)
			continue
		}
		if _, err := replay.Run(ctx, nil, adm, replay.Options{Group: c.group, Topic: topic, From: from}, out); err != nil {
			return sum, fmt.Errorf("reindex: %w", err)
		}
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stops := map[string]func() error{}
	stopOne := func(service string) {
		if stop := stops[service]; stop != nil {
			if err := stop(); err != nil {
				fmt.Fprintf(out, "stop the temporary %s: %v\n", service, err)
			}
			delete(stops, service)
		}
	}
	defer func() {
		for service := range stops {
			stopOne(service)
		}
	}()
	// expected marks the services stackctl stops itself: their exit does
	// not end the reindex.
	var expectedMu sync.Mutex
	expected := map[string]bool{}
	expect := func(service string) {
		expectedMu.Lock()
		expected[service] = true
		expectedMu.Unlock()
	}
	for _, c := range consumers {
		env := []string{
			"STACKSTREAM_OPENSEARCH_INDEX_GENERATION=" + strconv.Itoa(sum.To),
			"STACKSTREAM_" + strings.ToUpper(c.service) + "_GROUP=" + c.group,
			"STACKSTREAM_LISTEN_ADDR=127.0.0.1:0",
		}
		if !opts.Run {
			fmt.Fprintf(out, "start the temporary %s (as many as the live one, any host): %s stackstream-%s\n", c.service, strings.Join(env[:2], " "), c.service)
			fmt.Fprintf(out, "  on Kubernetes: set %s in the ConfigMap stackstream-reindex and scale deployment/stackstream-%s-reindex up (docs/STACKCTL.md)\n", env[0], c.service)
			continue
		}
		stop, done, exitErr, err := opts.Starter(ctx, c.service, env)
		if err != nil {
			return sum, fmt.Errorf("reindex: start the temporary %s: %w", c.service, err)
		}
		stops[c.service] = stop
		fmt.Fprintf(out, "started the temporary %s: %s\n", c.service, strings.Join(env[:2], " "))
		go func(service string) {
			<-done
			expectedMu.Lock()
			ok := expected[service]
			expectedMu.Unlock()
			if !ok {
				cancel(fmt.Errorf("the temporary %s exited: %v", service, exitErr()))
			}
		}(c.service)
	}

	// A temporary group is caught up once it is as close to the end as
	// its live group: under live load neither is at the end (the rollup
	// waits up to a second to fetch in batches). waitPast below then
	// makes each temporary group reach what its live group committed.
	progress := replay.Progress{Adm: adm, Topic: topic, Groups: sum.Groups, Live: map[string]string{}, Interval: opts.Interval, Out: out}
	for _, c := range consumers {
		progress.Live[c.group] = c.live
	}
	// The symbolizer writes the topic in transactions, so each partition
	// ends in a commit marker that no consumer commits past: under live
	// load every group, the live ones too, stays one offset short per
	// partition. Those offsets are allowed on top of MaxLeft.
	tails, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = tails.Error()
	}
	if err != nil {
		return sum, fmt.Errorf("reindex: list end offsets of %s: %w", topic, err)
	}
	markers := int64(len(tails[topic]) * len(sum.Groups))
	d, err := progress.Follow(ctx, opts.MaxLeft+markers)
	sum.Processed = d.Processed
	if err != nil {
		return sum, fmt.Errorf("reindex: %w", cause(ctx, err))
	}
	fmt.Fprintf(out, "caught up: %d records left, %d processed in %s\n", d.Left, d.Processed, d.Elapsed.Round(time.Second))
	// The new generation must hold at least what readers see now: each
	// temporary group gets as far as its live group has committed.
	for _, c := range consumers {
		live, err := replay.Positions(ctx, adm, c.live, topic)
		if err != nil {
			return sum, fmt.Errorf("reindex: %w", err)
		}
		if err := waitPast(ctx, adm, []string{c.group}, topic, live, nil, opts.Interval, out); err != nil {
			return sum, fmt.Errorf("reindex: %w", cause(ctx, err))
		}
	}

	// The rollup writes the windows still open (the last minutes, the
	// current hour) only when a partition idles or it stops: stop it now,
	// so the new generation holds them at the swap. The live rollup
	// rewrites whole windows through the names, so what it folds in
	// meanwhile lands in the new generation once it writes after the swap.
	for _, c := range consumers {
		if c.service != "rollup" {
			continue
		}
		if opts.Run {
			expect(c.service)
			stopOne(c.service)
		} else {
			fmt.Fprintf(out, "stop the temporary rollup now (group %s): it writes its open windows as it stops; the swap follows\n", c.group)
		}
		if err := waitEmpty(ctx, adm, c.group, opts.Interval, out); err != nil {
			return sum, fmt.Errorf("reindex: %w", cause(ctx, err))
		}
	}

	// What the topics no longer hold: copy it, or keep its name where it is.
	since, trimmed, err := firstRecord(ctx, adm, topic, from)
	if err != nil {
		return sum, fmt.Errorf("reindex: %w", err)
	}
	if trimmed {
		if l, err = opensearch.ReadLayout(ctx, osc, names); err != nil {
			return sum, fmt.Errorf("reindex: %w", err)
		}
		if sum.Gaps, err = fillGaps(ctx, osc, names, l, sum.To, since, opts.Interval, out); err != nil {
			return sum, fmt.Errorf("reindex: %w", err)
		}
	}

	// Refresh the new generation so readers find everything at the swap.
	if err := refresh(ctx, osc, names.GenerationPatterns(sum.To)); err != nil {
		return sum, fmt.Errorf("reindex: %w", err)
	}
	sum.Counts = map[int]DocCounts{}
	for _, g := range []int{sum.From, sum.To} {
		c, err := generationCounts(ctx, osc, names, g)
		if err != nil {
			return sum, fmt.Errorf("reindex: %w", err)
		}
		sum.Counts[g] = c
	}
	if l, err = opensearch.ReadLayout(ctx, osc, names); err != nil {
		return sum, fmt.Errorf("reindex: %w", err)
	}
	if _, ok := l[names.Physical(sum.To, names.Stacks())]; !ok && opts.IndexerGroup != "" {
		return sum, fmt.Errorf("reindex: generation %d has no stacks index: the temporary indexer indexed nothing (empty topic, or records older than --from?); nothing swapped", sum.To)
	}
	sum.Swap = opensearch.PlanSwap(l, names, sum.To, sum.Gaps.KeptSamples...)
	swapStart := time.Now()
	if err := sum.Swap.Apply(ctx, osc); err != nil {
		return sum, fmt.Errorf("reindex: %w", err)
	}
	fmt.Fprintf(out, "swapped in one request (%s): %d names moved, %d added, %d generation-0 indices replaced, %d kept on their generation\n",
		time.Since(swapStart).Round(time.Millisecond), len(sum.Swap.Moved), len(sum.Swap.Added), len(sum.Swap.Removed), len(sum.Swap.Kept))
	for _, k := range sum.Swap.Kept {
		fmt.Fprintf(out, "  kept: %s (generation %d has no index for it: the topics no longer hold its records)\n", k, sum.To)
	}

	// A live writer that read the serving generation just before the swap
	// may have created a new period's index in the old one: move it too.
	select {
	case <-ctx.Done():
		return sum, fmt.Errorf("reindex: %w", cause(ctx, ctx.Err()))
	case <-time.After(2 * time.Second):
	}
	moved, err := moveLateNames(ctx, osc, names, l, sum.To, sum.Gaps.KeptSamples)
	if err != nil {
		return sum, fmt.Errorf("reindex: move names created during the swap: %w", err)
	}
	if len(moved) > 0 {
		fmt.Fprintf(out, "moved %d names a live writer created during the swap: %s\n", len(moved), strings.Join(moved, ", "))
	}

	// What the live indexer had stored before the swap and the temporary
	// one had not yet reached: let it index that.
	listed, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return sum, fmt.Errorf("reindex: list end offsets of %s: %w", topic, err)
	}
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	var running []string
	for _, c := range consumers {
		if c.service != "rollup" { // stopped before the swap
			running = append(running, c.group)
		}
	}
	// On an idle topic the groups stay short of these ends by the markers
	// that end the symbolizer's transactions: the probe tells those apart.
	if err := waitPast(ctx, adm, running, topic, ends, markersOnly(cfg.Kafka, topic), opts.Interval, out); err != nil {
		return sum, fmt.Errorf("reindex: %w", cause(ctx, err))
	}
	if opts.Run {
		for _, c := range consumers {
			expect(c.service)
			stopOne(c.service)
		}
		if _, err := adm.DeleteGroups(context.WithoutCancel(ctx), sum.Groups...); err != nil {
			fmt.Fprintf(out, "delete the temporary groups %s: %v\n", strings.Join(sum.Groups, ", "), err)
		} else {
			fmt.Fprintf(out, "stopped the temporary consumers and deleted their groups\n")
		}
		for _, c := range consumers {
			if c.service != "rollup" {
				continue
			}
			// Its partitions' snapshots (docs/ROLLUP.md, "Snapshots").
			state := record.RollupStateTopic(cfg.Kafka.TopicPrefix, c.group)
			if resp, err := adm.DeleteTopic(context.WithoutCancel(ctx), state); err == nil && resp.Err == nil {
				fmt.Fprintf(out, "deleted the temporary rollup's state topic %s\n", state)
			}
		}
	} else {
		fmt.Fprintf(out, "generation %d serves: stop the temporary consumers now (groups %s)\n", sum.To, strings.Join(sum.Groups, ", "))
	}
	ctx = context.WithoutCancel(ctx)
	// The new generation's partial days, now that no temporary indexer
	// writes them any more.
	for _, name := range sum.Gaps.KeptSamples {
		if err := deleteUnservedIndex(ctx, osc, names.Physical(sum.To, name)); err != nil {
			fmt.Fprintf(out, "delete the partial %s: %v\n", names.Physical(sum.To, name), err)
		}
	}

	if opts.DeleteOld && sum.From > 0 {
		deleted, kept, err := opensearch.DeleteUnserved(ctx, osc, names, sum.From)
		sum.Deleted = deleted
		if err != nil {
			return sum, fmt.Errorf("reindex: delete generation %d: %w", sum.From, err)
		}
		fmt.Fprintf(out, "deleted %d indices of generation %d", len(deleted), sum.From)
		if len(kept) > 0 {
			fmt.Fprintf(out, "; kept %d that still serve: %s", len(kept), strings.Join(kept, ", "))
		}
		fmt.Fprintln(out)
	} else if sum.From == 0 {
		sum.Deleted = sum.Swap.Removed
	} else {
		fmt.Fprintf(out, "generation %d stays until you run stackctl reindex again with --delete-old, or delete %s\n", sum.From, strings.Join(names.GenerationPatterns(sum.From), ","))
	}
	sum.Elapsed = time.Since(began).Round(time.Millisecond)
	old, now := sum.Counts[sum.From], sum.Counts[sum.To]
	fmt.Fprintf(out, "summary: generation %d -> %d in %s; %d records indexed again; documents at the swap (%s): generation %d %v, generation %d %v\n",
		sum.From, sum.To, sum.Elapsed.Round(time.Second), sum.Processed, docCountsLegend, sum.From, old, sum.To, now)
	if old.Lifecycle != now.Lifecycle {
		fmt.Fprintf(out, "the live rollup's lifecycle writes generation %d's fleet heads and day trees and deletes its minute trees past retention: within a minute for the last hours, within STACKSTREAM_ROLLUP_LIFECYCLE_INTERVAL for older ones\n", sum.To)
	}
	return sum, nil
}

// moveLateNames points to generation to the names that resolve to another
// generation now but did not exist in before, the layout the swap was
// planned on: a live writer created them meanwhile. Generation to gets an
// index for each (the temporary indexer, still running, fills it), then
// one _aliases request moves them. Names that existed before and have no
// index in generation to stay where they are (the swap's "kept").
func moveLateNames(ctx context.Context, osc *opensearchapi.Client, names indices.Names, before opensearch.Layout, to int, keep []string) ([]string, error) {
	late, err := opensearch.ReadLayout(ctx, osc, names)
	if err != nil {
		return nil, err
	}
	var created []string
	for _, p := range late {
		if p.Gen == to {
			continue
		}
		for _, name := range p.Aliases {
			if _, existed := before.Serving(name); existed {
				continue
			}
			if err := opensearch.CreateIndex(ctx, osc, names.Physical(to, name)); err != nil {
				return nil, err
			}
			created = append(created, name)
		}
	}
	if late, err = opensearch.ReadLayout(ctx, osc, names); err != nil {
		return nil, err
	}
	s := opensearch.PlanSwap(late, names, to, keep...)
	if err := s.Apply(ctx, osc); err != nil {
		return nil, err
	}
	return append(s.Moved, s.Added...), nil
}

// deleteUnservedIndex deletes index unless an alias points to it.
func deleteUnservedIndex(ctx context.Context, cl *opensearchapi.Client, index string) error {
	var aliases map[string]struct {
		Aliases map[string]json.RawMessage `json:"aliases"`
	}
	if err := getJSON(ctx, cl, "/"+url.PathEscape(index)+"/_alias", &aliases); err != nil {
		return err
	}
	if len(aliases[index].Aliases) > 0 {
		return fmt.Errorf("%s serves, not deleted", index)
	}
	status, body, err := opensearch.Raw(ctx, cl, http.MethodDelete, "/"+url.PathEscape(index), nil)
	if err != nil {
		return err
	}
	if status != http.StatusOK && status != http.StatusNotFound {
		return fmt.Errorf("HTTP %d: %.200s", status, body)
	}
	return nil
}

// cause is the reason ctx ended (a temporary consumer that exited), or err.
func cause(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		return c
	}
	return err
}

// waitEmpty waits until group has no members.
func waitEmpty(ctx context.Context, adm *kadm.Client, group string, interval time.Duration, out io.Writer) error {
	for {
		described, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return fmt.Errorf("describe group %s: %w", group, err)
		}
		g := described[group]
		if len(g.Members) == 0 {
			return nil
		}
		fmt.Fprintf(out, "group %s still has %d member(s)\n", group, len(g.Members))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(max(interval, 100*time.Millisecond), time.Second)):
		}
	}
}

// waitPast waits until every group has processed at least ends on every
// partition (replay.Positions). With a probe, a group short of an end only by
// transaction markers (markersOnly) counts as there: nothing is left for it.
func waitPast(ctx context.Context, adm *kadm.Client, groups []string, topic string, ends map[int32]int64, probe markerProbe, interval time.Duration, out io.Writer) error {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	type gap struct {
		p        int32
		from, to int64
	}
	markers := map[gap]bool{}
	for {
		var behind int64
		for _, g := range groups {
			committed, err := replay.Positions(ctx, adm, g, topic)
			if err != nil {
				return err
			}
			for p, end := range ends {
				left := max(end-committed[p], 0)
				if left > 0 && probe != nil {
					k := gap{p, committed[p], end}
					only, seen := markers[k]
					if !seen {
						if only, err = probe(ctx, p, k.from, k.to); err != nil {
							return err
						}
						markers[k] = only
					}
					if only {
						left = 0
					}
				}
				behind += left
			}
		}
		if behind == 0 {
			return nil
		}
		fmt.Fprintf(out, "%d records to go for %s\n", behind, strings.Join(groups, ", "))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(interval, time.Second)):
		}
	}
}

func refresh(ctx context.Context, cl *opensearchapi.Client, patterns []string) error {
	path := "/" + strings.Join(patterns, ",") + "/_refresh?ignore_unavailable=true&allow_no_indices=true"
	status, body, err := opensearch.Raw(ctx, cl, http.MethodPost, path, nil)
	if err != nil {
		return fmt.Errorf("refresh: %w", err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("refresh: HTTP %d: %.200s", status, body)
	}
	return nil
}

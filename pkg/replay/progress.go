package replay

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Progress follows consumer groups working through a topic and prints, every
// Interval, the records they have left, their pace and when they will be
// done: the one progress line of stackctl replay and stackctl reindex.
type Progress struct {
	Adm    *kadm.Client
	Topic  string
	Groups []string
	// Live maps a group of Groups to the group it catches up with: only
	// its lag beyond that group's counts as left. A consumer that waits
	// to fetch in batches is never at the end under live load, and
	// neither is its live twin (stackctl reindex).
	Live     map[string]string
	Interval time.Duration // default 5s
	Out      io.Writer
}

// Drained is where the groups stood when Follow returned.
type Drained struct {
	Left      int64         // records left, all groups together
	Processed int64         // records committed since Follow began
	Elapsed   time.Duration // since Follow began
}

// Follow prints the groups' progress until the records they have left
// (beyond their Live groups') together are at most maxLeft, or ctx ends
// (then it returns ctx.Err()). The pace counts committed offsets, so it
// stays right while producers add records to the topic.
func (p Progress) Follow(ctx context.Context, maxLeft int64) (Drained, error) {
	interval := p.Interval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	began := time.Now()
	base := map[string]int64{}
	var d Drained
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		var (
			left, processed int64
			parts           []string
			lagErr          error
		)
		for _, g := range p.Groups {
			lag, committed, err := groupLag(ctx, p.Adm, g, p.Topic)
			if err != nil {
				lagErr = fmt.Errorf("group %s: %w", g, err)
				break
			}
			if _, ok := base[g]; !ok {
				base[g] = committed
			}
			if live := p.Live[g]; live != "" {
				liveLag, _, err := groupLag(ctx, p.Adm, live, p.Topic)
				if err != nil {
					lagErr = fmt.Errorf("group %s: %w", live, err)
					break
				}
				lag = max(lag-liveLag, 0)
			}
			left += lag
			processed += max(committed-base[g], 0)
			parts = append(parts, fmt.Sprintf("%s %d", g, lag))
		}
		d.Elapsed = time.Since(began).Round(time.Millisecond)
		switch {
		case lagErr != nil && ctx.Err() != nil:
			return d, ctx.Err()
		case lagErr != nil:
			fmt.Fprintf(p.Out, "lag: %v (retrying)\n", lagErr)
		default:
			d.Left, d.Processed = left, processed
			groups := ""
			if len(parts) > 1 {
				groups = " (" + strings.Join(parts, ", ") + ")"
			}
			fmt.Fprintf(p.Out, "%d records left%s: %d processed in %s%s\n", left, groups, processed, d.Elapsed.Round(time.Second), rateETA(processed, left, d.Elapsed))
			if left <= maxLeft {
				return d, nil
			}
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(p.Out, "stopped following with %d records left after %s\n", d.Left, d.Elapsed)
			return d, ctx.Err()
		case <-tick.C:
		}
	}
}

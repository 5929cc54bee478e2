package indexer

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
)

// Retention deletes daily samples indices whose day ended more than Days ago,
// and force-merges to one segment those whose day ended more than MergeAfter
// ago (0 never merges). A finished day is then smaller and faster to read:
// the merge drops the copies of the documents OpenSearch keeps for peer
// recovery (_recovery_source, see schemas/opensearch.md) and leaves one
// segment to search.
type Retention struct {
	Client     *opensearchapi.Client
	Names      indices.Names
	Days       int
	StacksDays int // stacks unused this many days are deleted; 0 keeps them
	MergeAfter time.Duration
	Interval   time.Duration
	Logger     *slog.Logger
	Now        func() time.Time
}

// Run applies retention now and then every Interval until ctx ends.
func (r *Retention) Run(ctx context.Context) error {
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		if deleted, err := r.Apply(ctx); err != nil {
			r.Logger.Warn("apply retention", "err", err)
		} else if len(deleted) > 0 {
			r.Logger.Info("deleted expired indices", "indices", deleted, "retention_days", r.Days)
		}
		if n, err := r.PruneStacks(ctx); err != nil {
			r.Logger.Warn("prune stacks", "err", err)
		} else if n > 0 {
			r.Logger.Info("deleted unused stacks", "stacks", n, "stacks_retention_days", r.StacksDays)
		}
		if merged, err := r.Merge(ctx); err != nil {
			r.Logger.Warn("merge finished days", "err", err)
		} else if len(merged) > 0 {
			r.Logger.Info("merged finished days", "indices", merged)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Apply deletes the expired samples indices and returns their names. An index
// dated D holds events of day D, so it expires once D+1 is older than Days.
func (r *Retention) Apply(ctx context.Context) ([]string, error) {
	if r.Days <= 0 {
		return nil, nil
	}
	cutoff := r.Now().UTC().AddDate(0, 0, -r.Days)
	return opensearch.DeleteEnded(ctx, r.Client, r.Names.SamplesPattern(), r.Names.IndexEnd, cutoff)
}

// PruneStacks deletes the stacks whose last_seen day is more than
// StacksDays old: no samples or rollups document kept refers to them any
// more. Stacks written before last_seen existed (stacks schema 2) have none
// and are kept until a profile uses them again.
func (r *Retention) PruneStacks(ctx context.Context) (int64, error) {
	if r.StacksDays <= 0 || r.Days <= 0 {
		return 0, nil // samples kept forever refer to every stack
	}
	cutoff := indices.DayOf(r.Now().UTC().AddDate(0, 0, -r.StacksDays))
	return opensearch.DeleteMatching(ctx, r.Client, r.Names.Stacks(), map[string]any{
		"range": map[string]any{"last_seen": map[string]any{"lt": cutoff}},
	})
}

// Merge force-merges to one segment the samples indices of days that ended
// more than MergeAfter ago and still have several segments, one at a time,
// and returns their names. A merge that outlasts the client's timeout goes
// on in OpenSearch; the next run finds it done or asks again (OpenSearch
// queues force merges, one per node at a time).
func (r *Retention) Merge(ctx context.Context) ([]string, error) {
	if r.MergeAfter <= 0 {
		return nil, nil
	}
	var stats struct {
		Indices map[string]struct {
			Primaries struct {
				Segments struct {
					Count int `json:"count"`
				} `json:"segments"`
			} `json:"primaries"`
		} `json:"indices"`
	}
	if err := r.get(ctx, "read segment counts", "/"+r.Names.SamplesPattern()+"/_stats/segments?level=indices&ignore_unavailable=true&allow_no_indices=true", &stats); err != nil {
		return nil, err
	}
	var merged []string
	for index, st := range stats.Indices {
		day, ok := r.Names.IndexTime(index)
		if !ok || st.Primaries.Segments.Count <= 1 || r.Now().Sub(day.AddDate(0, 0, 1)) < r.MergeAfter {
			continue
		}
		status, body, err := opensearch.Raw(ctx, r.Client, http.MethodPost, "/"+index+"/_forcemerge?max_num_segments=1", nil)
		if err != nil {
			return merged, fmt.Errorf("force merge %s: %w", index, err)
		}
		if status != http.StatusOK {
			return merged, fmt.Errorf("force merge %s: HTTP %d: %.200s", index, status, body)
		}
		merged = append(merged, index)
	}
	return merged, nil
}

// get decodes the JSON answer to a GET of path into out; what names the
// request in errors.
func (r *Retention) get(ctx context.Context, what, path string, out any) error {
	status, body, err := opensearch.Raw(ctx, r.Client, http.MethodGet, path, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d: %.200s", what, status, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s: parse answer: %w", what, err)
	}
	return nil
}

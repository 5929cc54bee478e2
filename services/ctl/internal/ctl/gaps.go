package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
)

// Gaps is what fillGaps did to make the new generation hold what the old
// one holds from before the topics' first record.
type Gaps struct {
	Since        time.Time // the topics' first record (or --from)
	KeptSamples  []string  // days left on the old generation: samples have no _source to copy
	RollupsCopy  int64     // rollups documents copied from the old generation
	StacksCopied int64     // stacks the new generation did not have
}

// firstRecord is the time of the first record of topic at or after from,
// the latest over the partitions: from then on every partition is whole.
// trimmed says whether records before it are gone from the new
// generation's source: a partition whose log no longer starts at offset 0,
// or a from that skips some.
func firstRecord(ctx context.Context, adm *kadm.Client, topic string, from time.Time) (t0 time.Time, trimmed bool, err error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return t0, false, fmt.Errorf("list the start offsets of %s: %w", topic, err)
	}
	starts.Each(func(o kadm.ListedOffset) { trimmed = trimmed || o.Offset > 0 })
	listed, err := adm.ListOffsetsAfterMilli(ctx, from.UnixMilli(), topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return t0, false, fmt.Errorf("list the first records of %s: %w", topic, err)
	}
	listed.Each(func(o kadm.ListedOffset) {
		if s, ok := starts.Lookup(topic, o.Partition); ok && o.Offset > s.Offset {
			trimmed = true
		}
	})
	listed.Each(func(o kadm.ListedOffset) {
		if o.Timestamp >= 0 {
			if ts := time.UnixMilli(o.Timestamp); ts.After(t0) {
				t0 = ts
			}
		}
	})
	return t0, trimmed, nil
}

// fillGaps runs before the swap when the topics no longer hold every
// record (retention deleted their start, or --from skipped it). The new
// generation was built from the records from since on (at the latest:
// partitions begin at slightly different times); for every name whose
// index in the old generation holds documents older than that:
//   - rollups: those documents are copied into the new generation (over
//     those with the same ID: a window that began before since is whole
//     only in the old generation), the stack rollups with their stacks read
//     from doc values (copyStackRollups);
//   - samples: their _source is disabled, nothing can be copied, so a day
//     of which the old generation holds more documents from before since
//     than the new one stays on the old generation (returned in
//     KeptSamples, for the swap to leave; the new generation's partial
//     index is deleted once the temporary indexer has stopped).
//
// Stacks the new generation lacks are copied from the old one (op_type
// create: the new generation's own documents win), so every kept or copied
// document still finds its stacks.
func fillGaps(ctx context.Context, osc *opensearchapi.Client, names indices.Names, l opensearch.Layout, to int, since time.Time, interval time.Duration, out io.Writer) (Gaps, error) {
	g := Gaps{Since: since}
	older := map[string]any{"range": map[string]any{"@timestamp": map[string]any{"lt": since.UTC().Format(time.RFC3339Nano)}}}
	samplesPrefix := strings.TrimSuffix(names.SamplesPattern(), "*")
	for _, p := range l.Of(to) {
		old, ok := l.Serving(p.Name)
		if !ok || old.Gen == to {
			continue
		}
		if p.Name == names.Stacks() {
			created, err := copyDocs(ctx, osc, map[string]any{
				"conflicts": "proceed",
				"source":    map[string]any{"index": old.Index},
				"dest":      map[string]any{"index": p.Index, "op_type": "create"},
			}, "stacks", interval, out)
			g.StacksCopied += created
			if err != nil {
				return g, err
			}
			continue
		}
		had, err := countQuery(ctx, osc, old.Index, older)
		if err != nil || had == 0 {
			if err != nil {
				return g, err
			}
			continue
		}
		if strings.HasPrefix(p.Name, samplesPrefix) {
			// A day the other partitions rebuilt whole is not a gap.
			has, err := countQuery(ctx, osc, p.Index, older)
			if err != nil {
				return g, err
			}
			if had <= has {
				continue
			}
			g.KeptSamples = append(g.KeptSamples, p.Name)
			fmt.Fprintf(out, "%s stays on generation %d: it holds %d documents from before %s, the new generation %d (samples cannot be copied)\n", p.Name, old.Gen, had, since.UTC().Format(time.RFC3339), has)
			continue
		}
		if err := dropPackedOverPerStack(ctx, osc, old.Index, p.Index, older); err != nil {
			return g, err
		}
		// _reindex copies _source only, which holds no stacks since
		// rollups schema 4: the stack rollups are copied with their doc
		// values (copyStackRollups), every other rollup by _reindex.
		what := p.Name + " before " + since.UTC().Format(time.RFC3339)
		created, err := copyDocs(ctx, osc, map[string]any{
			"source": map[string]any{"index": old.Index, "query": map[string]any{"bool": map[string]any{"filter": []any{older}, "must_not": []any{stackKinds}}}},
			"dest":   map[string]any{"index": p.Index},
		}, what, interval, out)
		g.RollupsCopy += created
		if err != nil {
			return g, err
		}
		created, err = copyStackRollups(ctx, osc, old.Index, p.Index, map[string]any{"bool": map[string]any{"filter": []any{older, stackKinds}}},
			"stack rollups of "+what, interval, out)
		g.RollupsCopy += created
		if err != nil {
			return g, err
		}
	}
	return g, nil
}

// dropPackedOverPerStack deletes the new generation's stacks documents
// from before since when the old generation holds stack documents there
// (one per stack, from before rollups schema 3): those windows are whole
// only in the old generation, and the query reads a window holding both
// kinds from its stacks document (schemas/opensearch.md, "Stack rollups"),
// which the copy would not overwrite (other _id).
func dropPackedOverPerStack(ctx context.Context, osc *opensearchapi.Client, oldIndex, newIndex string, older map[string]any) error {
	ofKind := func(kind string) map[string]any {
		return map[string]any{"bool": map[string]any{"filter": []any{older, map[string]any{"term": map[string]any{"kind": kind}}}}}
	}
	n, err := countQuery(ctx, osc, oldIndex, ofKind(indices.KindStack))
	if err != nil || n == 0 {
		return err
	}
	if _, err := opensearch.DeleteMatching(ctx, osc, newIndex, ofKind(indices.KindStacks)); err != nil {
		return fmt.Errorf("drop %s's packed stacks before the copy: %w", newIndex, err)
	}
	return nil
}

// countQuery counts the documents of index that query matches.
func countQuery(ctx context.Context, cl *opensearchapi.Client, index string, query map[string]any) (int64, error) {
	body, err := json.Marshal(map[string]any{"query": query})
	if err != nil {
		return 0, err
	}
	status, resp, err := opensearch.Raw(ctx, cl, http.MethodPost, "/"+url.PathEscape(index)+"/_count", body)
	if err != nil {
		return 0, fmt.Errorf("count %s: %w", index, err)
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("count %s: HTTP %d: %.200s", index, status, resp)
	}
	var c struct {
		Count int64 `json:"count"`
	}
	if err := json.Unmarshal(resp, &c); err != nil {
		return 0, fmt.Errorf("count %s: %w", index, err)
	}
	return c.Count, nil
}

// copyDocs runs one _reindex as a task, prints its progress every
// interval, and returns the documents it created or updated.
func copyDocs(ctx context.Context, cl *opensearchapi.Client, req map[string]any, what string, interval time.Duration, out io.Writer) (int64, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	status, resp, err := opensearch.Raw(ctx, cl, http.MethodPost, "/_reindex?wait_for_completion=false&refresh=true", body)
	if err != nil {
		return 0, fmt.Errorf("copy %s: %w", what, err)
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("copy %s: HTTP %d: %.300s", what, status, resp)
	}
	var started struct {
		Task string `json:"task"`
	}
	if err := json.Unmarshal(resp, &started); err != nil || started.Task == "" {
		return 0, fmt.Errorf("copy %s: no task in %.200s", what, resp)
	}
	if interval <= 0 {
		interval = 5 * time.Second
	}
	for {
		var task struct {
			Completed bool `json:"completed"`
			Task      struct {
				Status struct {
					Total, Created, Updated int64
				} `json:"status"`
			} `json:"task"`
			Error    json.RawMessage `json:"error"`
			Response struct {
				Total, Created, Updated int64
				Failures                []json.RawMessage `json:"failures"`
			} `json:"response"`
		}
		if err := getJSON(ctx, cl, "/_tasks/"+url.PathEscape(started.Task), &task); err != nil {
			return 0, fmt.Errorf("copy %s: %w", what, err)
		}
		if task.Completed {
			done := task.Response.Created + task.Response.Updated
			switch {
			case len(task.Error) > 0 && string(task.Error) != "null":
				return done, fmt.Errorf("copy %s: %.300s", what, task.Error)
			case len(task.Response.Failures) > 0:
				return done, fmt.Errorf("copy %s: %d failures, first: %.300s", what, len(task.Response.Failures), task.Response.Failures[0])
			}
			fmt.Fprintf(out, "copied %s: %d new, %d replaced of %d\n", what, task.Response.Created, task.Response.Updated, task.Response.Total)
			return done, nil
		}
		s := task.Task.Status
		fmt.Fprintf(out, "copying %s: %d of %d\n", what, s.Created+s.Updated, s.Total)
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(min(interval, time.Second)):
		}
	}
}

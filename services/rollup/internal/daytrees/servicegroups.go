package daytrees

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
)

// withServiceGroups runs writeServiceGroups after the pass's other work
// (unless it failed) and adds what it wrote.
func (c *Compactor) withServiceGroups(ctx context.Context, now time.Time, written int, err error) (int, error) {
	if err != nil {
		return written, err
	}
	n, err := c.writeServiceGroups(ctx, now)
	return written + n, err
}

// writeServiceGroups writes, per type and settled hour of the last c.Days
// days and today, the hour's service groups document
// (indices.KindServiceGroups: every (service, host) group's 10-minute and
// hour sums) when it is missing or its sources differ from the
// fingerprint of the hour's service documents. A chart over settled hours
// with a step of 10, 20 or 30 minutes or whole hours reads these instead
// of every 10-minute document (services/query/internal/store,
// servicegroups.go).
func (c *Compactor) writeServiceGroups(ctx context.Context, now time.Time) (int, error) {
	last := now.Add(-HourSettle).Truncate(time.Hour)
	first := now.Truncate(24*time.Hour).AddDate(0, 0, -c.Days)
	written := 0
	for day := first; day.Before(last); day = day.Add(24 * time.Hour) {
		to := day.Add(24 * time.Hour)
		if last.Before(to) {
			to = last
		}
		n, err := c.serviceGroupsOfDay(ctx, day, to)
		written += n
		if err != nil {
			return written, fmt.Errorf("service groups of %s: %w", day.Format(time.DateOnly), err)
		}
	}
	return written, nil
}

// hourChecks are the fingerprints of the service documents of the hours
// from from until to, per type and hour.
func (c *Compactor) hourChecks(ctx context.Context, index string, from, to time.Time) (map[hourKey]string, error) {
	var out struct {
		Aggregations struct {
			Types struct {
				Buckets []struct {
					Key   string `json:"key"`
					Hours struct {
						Buckets []struct {
							Key int64 `json:"key"`
							indices.ServiceGroupsCheck
						} `json:"buckets"`
					} `json:"hours"`
				} `json:"buckets"`
			} `json:"types"`
		} `json:"aggregations"`
	}
	hourly := map[string]any{"date_histogram": map[string]any{"field": "@timestamp", "fixed_interval": "1h", "min_doc_count": 1},
		"aggs": indices.ServiceGroupsCheckAggs()}
	err := c.aggregate(ctx, index, map[string]any{
		"size": 0, "query": serviceWindows(from, to),
		"aggs": map[string]any{"types": map[string]any{"terms": map[string]any{"field": "type", "size": 100}, "aggs": map[string]any{"hours": hourly}}},
	}, &out)
	if err != nil {
		return nil, err
	}
	checks := map[hourKey]string{}
	for _, t := range out.Aggregations.Types.Buckets {
		for _, h := range t.Hours.Buckets {
			checks[hourKey{t.Key, time.UnixMilli(h.Key).Unix()}] = h.Sources()
		}
	}
	return checks, nil
}

// serviceGroupsOfDay writes the stale or missing service groups documents
// of the hours from day until to.
func (c *Compactor) serviceGroupsOfDay(ctx context.Context, day, to time.Time) (int, error) {
	index := c.Names.Rollups(day)
	checks, err := c.hourChecks(ctx, index, day, to)
	if err != nil {
		return 0, err
	}
	docs, err := c.search(ctx, index, map[string]any{
		"size": maxHourDocs, "_source": []string{"type", "@timestamp", "sources"},
		"query": map[string]any{"bool": map[string]any{"filter": []any{
			map[string]any{"term": map[string]any{"kind": indices.KindServiceGroups}},
			map[string]any{"range": map[string]any{"@timestamp": map[string]any{"gte": day.UnixMilli(), "lt": to.UnixMilli(), "format": "epoch_millis"}}},
		}}},
	})
	if err != nil {
		return 0, err
	}
	current := map[hourKey]string{}
	for _, h := range docs {
		current[hourKey{h.Source.Type, h.Source.Timestamp.Unix()}] = h.Source.Sources
	}
	written := 0
	for k, sources := range checks {
		if current[k] == sources {
			continue
		}
		ok, err := c.writeHourGroups(ctx, index, k.typ, time.Unix(k.hour, 0).UTC(), sources)
		if err != nil {
			return written, err
		}
		if ok {
			written++
		}
	}
	return written, nil
}

// writeHourGroups reads the hour's service documents of typ summed per
// group and 10-minute window (a composite aggregation, paged) and writes
// its service groups document, unless their fingerprint changed from
// sources meanwhile (a rewrite during the read: the next pass makes it).
func (c *Compactor) writeHourGroups(ctx context.Context, index, typ string, hour time.Time, sources string) (bool, error) {
	var b indices.ServiceGroupsBuilder
	var after map[string]any
	for {
		composite := map[string]any{"size": 10000, "sources": []any{
			map[string]any{"service": map[string]any{"terms": map[string]any{"field": "service", "missing_bucket": true}}},
			map[string]any{"host": map[string]any{"terms": map[string]any{"field": "host", "missing_bucket": true}}},
			map[string]any{"w": map[string]any{"date_histogram": map[string]any{"field": "@timestamp", "fixed_interval": "10m"}}},
		}}
		if after != nil {
			composite["after"] = after
		}
		var out struct {
			Aggregations struct {
				Groups struct {
					AfterKey map[string]any `json:"after_key"`
					Buckets  []struct {
						Key struct {
							Service *string `json:"service"`
							Host    *string `json:"host"`
							W       int64   `json:"w"`
						} `json:"key"`
						Ten  sums `json:"ten"`
						Hour sums `json:"hour"`
					} `json:"buckets"`
				} `json:"groups"`
			} `json:"aggregations"`
		}
		query := serviceWindows(hour, hour.Add(time.Hour))
		query["bool"].(map[string]any)["filter"] = append(query["bool"].(map[string]any)["filter"].([]any),
			map[string]any{"term": map[string]any{"type": typ}})
		err := c.aggregate(ctx, index, map[string]any{"size": 0, "query": query, "aggs": map[string]any{"groups": map[string]any{
			"composite": composite, "aggs": map[string]any{"ten": sumOf(indices.ResolutionTenMinutes), "hour": sumOf(indices.ResolutionHour)},
		}}}, &out)
		if err != nil {
			return false, err
		}
		for _, g := range out.Aggregations.Groups.Buckets {
			service, host := "", ""
			if g.Key.Service != nil {
				service = *g.Key.Service
			}
			if g.Key.Host != nil {
				host = *g.Key.Host
			}
			start := time.UnixMilli(g.Key.W)
			b.Add(service, host, indices.ResolutionTenMinutes, start, g.Ten.DocCount, int64(g.Ten.Sum.Value))
			b.Add(service, host, indices.ResolutionHour, start, g.Hour.DocCount, int64(g.Hour.Sum.Value))
		}
		after = out.Aggregations.Groups.AfterKey
		if len(out.Aggregations.Groups.Buckets) == 0 || after == nil {
			break
		}
	}
	check, err := c.hourChecks(ctx, index, hour, hour.Add(time.Hour))
	if err != nil || check[hourKey{typ, hour.Unix()}] != sources {
		return false, err
	}
	if err := c.put(ctx, index, b.Doc(typ, hour, sources)); err != nil {
		return false, err
	}
	return true, nil
}

// serviceWindows selects the 10-minute and hourly service documents
// starting from from until to.
func serviceWindows(from, to time.Time) map[string]any {
	return map[string]any{"bool": map[string]any{"filter": []any{
		map[string]any{"term": map[string]any{"kind": indices.KindService}},
		map[string]any{"terms": map[string]any{"resolution": []string{indices.ResolutionTenMinutes, indices.ResolutionHour}}},
		map[string]any{"range": map[string]any{"@timestamp": map[string]any{"gte": from.UnixMilli(), "lt": to.UnixMilli(), "format": "epoch_millis"}}},
	}}}
}

// sums is a filter aggregation's document count and value sum.
type sums struct {
	DocCount int64 `json:"doc_count"`
	Sum      struct {
		Value float64 `json:"value"`
	} `json:"sum"`
}

// sumOf counts and sums the service documents of resolution res.
func sumOf(res string) map[string]any {
	return map[string]any{"filter": map[string]any{"term": map[string]any{"resolution": res}},
		"aggs": map[string]any{"sum": map[string]any{"sum": map[string]any{"field": "value"}}}}
}

// aggregate runs a search of aggregations and decodes its answer into
// out; a timed-out or partial answer is an error (ErrPartial).
func (c *Compactor) aggregate(ctx context.Context, index string, body map[string]any, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	path := "/" + index + "/_search?ignore_unavailable=true&allow_no_indices=true&filter_path=" +
		url.QueryEscape("timed_out,_shards.failed,aggregations")
	status, resp, err := opensearch.Raw(ctx, c.Client, http.MethodPost, path, raw)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("search %s: HTTP %d: %.300s", index, status, resp)
	}
	var check struct {
		TimedOut bool `json:"timed_out"`
		Shards   struct {
			Failed int `json:"failed"`
		} `json:"_shards"`
	}
	if err := json.Unmarshal(resp, &check); err != nil {
		return fmt.Errorf("decode search answer: %w", err)
	}
	if check.TimedOut || check.Shards.Failed > 0 {
		return fmt.Errorf("search %s: %w", index, ErrPartial)
	}
	if err := json.Unmarshal(resp, out); err != nil {
		return fmt.Errorf("decode search answer: %w", err)
	}
	return nil
}

package api

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// SearchResponse is the answer of /api/v1/search.
type SearchResponse struct {
	Query   string         `json:"query"`
	Results []SearchResult `json:"results"`
}

// SearchResult is one match; Label is set for label values.
type SearchResult struct {
	Kind  string  `json:"kind"` // function, service, host or label
	Label string  `json:"label,omitempty"`
	Name  string  `json:"name"`
	Share float64 `json:"share"`
}

// handleSearch matches a keyword (case-insensitive substring) against
// functions, services, hosts and label values, ranked by their share of
// the CPU time in the range.
func (a *API) handleSearch(ctx context.Context, _ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	kw := strings.TrimSpace(q.Get("q"))
	if kw == "" {
		return nil, badParam("q", "empty: give a keyword such as a function, service or host name")
	}
	if len(kw) > 256 {
		return nil, badParam("q", "longer than 256 bytes")
	}
	tr, err := parseRange(q, "from", "to", a.opts.Now(), a.opts.MaxRange)
	if err != nil {
		return nil, err
	}
	limit, err := parseInt(q, "limit", 20, 1, 1000)
	if err != nil {
		return nil, err
	}
	s := store.Selection{Type: record.ProfileCPU, Range: tr}
	total, err := a.store.CPUTotal(ctx, s)
	if err != nil {
		return nil, err
	}
	if total == 0 {
		return SearchResponse{Query: kw, Results: []SearchResult{}}, nil
	}
	results, err := a.searchFunctions(ctx, s, kw, limit, total)
	if err != nil {
		return nil, err
	}
	values, err := a.store.Values(ctx, s, kw, limit)
	if err != nil {
		return nil, err
	}
	results = append(results, mergeResults(shares(values, total))...)
	slices.SortStableFunc(results, func(x, y SearchResult) int {
		if c := cmp.Compare(y.Share, x.Share); c != 0 {
			return c
		}
		return cmp.Compare(x.Name, y.Name)
	})
	if len(results) > limit {
		results = results[:limit]
	}
	return SearchResponse{Query: kw, Results: results}, nil
}

// searchFunctions ranks functions containing kw by their total (inclusive)
// share. Long ranges read the per-function rollups; short ones (and
// clusters without rollups) sum every stack holding a matching function,
// MaxStacks stacks at a time (sharing the flame graph's stack cache), so a
// selection with more stacks than a flame graph reads per stack loses none.
func (a *API) searchFunctions(ctx context.Context, s store.Selection, kw string, limit int, total int64) ([]SearchResult, error) {
	if a.store.FromRollups(s) {
		res, err := a.store.FunctionRollups(ctx, s, kw, limit)
		if err != nil || len(res) > 0 {
			return shares(res, total), err
		}
	}
	lower := strings.ToLower(kw)
	byFunc := map[string]int64{}
	matches := map[string]bool{}
	seen := map[string]bool{}
	err := a.store.EachStackChunk(ctx, store.Selection{Type: s.Type, Range: s.Range}, func(m *store.Stacks) error {
		for id, v := range m.Values {
			clear(seen)
			for _, f := range m.Frames[id] {
				if seen[f] {
					continue
				}
				seen[f] = true
				match, known := matches[f]
				if !known {
					// The placeholders for missing stacks are not functions.
					synthetic := f == noStack || f == unknownStack || f == otherNodes
					match = !synthetic && strings.Contains(strings.ToLower(f), lower)
					matches[f] = match
				}
				if match {
					byFunc[f] += v
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res := make([]SearchResult, 0, len(byFunc))
	for f, v := range byFunc {
		if v > 0 {
			res = append(res, SearchResult{Kind: "function", Name: f, Share: float64(v) / float64(total)})
		}
	}
	return res, nil
}

// shares turns the store's matches into results with their share of total.
func shares(matches []store.Match, total int64) []SearchResult {
	if matches == nil {
		return nil
	}
	res := make([]SearchResult, 0, len(matches))
	for _, m := range matches {
		res = append(res, SearchResult{Kind: m.Kind, Label: m.Label, Name: m.Name, Share: m.Value / float64(total)})
	}
	return res
}

// mergeResults adds up results naming the same value: a label outside the
// contract is found both in older documents' labels.<name> and in newer
// ones' label_pairs.
func mergeResults(res []SearchResult) []SearchResult {
	type key struct{ kind, label, name string }
	at := make(map[key]int, len(res))
	out := res[:0]
	for _, r := range res {
		k := key{r.Kind, r.Label, r.Name}
		if i, ok := at[k]; ok {
			out[i].Share += r.Share
			continue
		}
		at[k] = len(out)
		out = append(out, r)
	}
	return out
}

package opensearch

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/schemas/indices"
)

// Index generations (schemas/indices, docs/STACKCTL.md): the names services
// use are aliases of one generation's physical indices, or in generation 0
// the physical indices themselves.

// Physical is one physical index under a prefix.
type Physical struct {
	Index   string   // its name
	Gen     int      // its generation
	Name    string   // the name it stands for (an alias of generation >= 1)
	Aliases []string // the aliases pointing to it now
}

// Layout is every stackstream index under a prefix, by physical name.
type Layout map[string]Physical

// ReadLayout lists the physical indices under names.Prefix with their aliases.
func ReadLayout(ctx context.Context, cl *opensearchapi.Client, names indices.Names) (Layout, error) {
	path := "/" + names.Prefix + "*/_alias?expand_wildcards=open,closed&allow_no_indices=true"
	status, body, err := Raw(ctx, cl, http.MethodGet, path, nil)
	if err != nil {
		return nil, fmt.Errorf("list indices and aliases under %s: %w", names.Prefix, err)
	}
	if status != http.StatusOK && status != http.StatusNotFound {
		return nil, fmt.Errorf("list indices and aliases under %s: HTTP %d: %s", names.Prefix, status, truncate(body, 300))
	}
	var resp map[string]struct {
		Aliases map[string]json.RawMessage `json:"aliases"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("list indices and aliases under %s: parse answer: %w", names.Prefix, err)
	}
	l := Layout{}
	for index, v := range resp {
		gen, name, ok := names.Generation(index)
		if !ok {
			continue // another prefix sharing the start of this one
		}
		p := Physical{Index: index, Gen: gen, Name: name}
		for a := range v.Aliases {
			p.Aliases = append(p.Aliases, a)
		}
		sort.Strings(p.Aliases)
		l[index] = p
	}
	return l, nil
}

// Serving is the physical index that name resolves to now: a physical index
// of that name (generation 0) or the index its alias points to.
func (l Layout) Serving(name string) (Physical, bool) {
	if p, ok := l[name]; ok {
		return p, true
	}
	for _, p := range l {
		if slices.Contains(p.Aliases, name) {
			return p, true
		}
	}
	return Physical{}, false
}

// Current is the generation the stacks name resolves to: the one services
// write. An empty cluster is generation 0.
func (l Layout) Current(names indices.Names) int {
	p, _ := l.Serving(names.Stacks())
	return p.Gen
}

// Generations are the generations holding at least one physical index, in order.
func (l Layout) Generations() []int {
	var out []int
	for _, p := range l {
		if !slices.Contains(out, p.Gen) {
			out = append(out, p.Gen)
		}
	}
	sort.Ints(out)
	return out
}

// Of lists the physical indices of generation gen by name.
func (l Layout) Of(gen int) []Physical {
	var out []Physical
	for _, p := range l {
		if p.Gen == gen {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// CurrentGeneration asks the cluster which generation the stacks name
// resolves to, with one small request: writers call it when they meet a
// name for the first time.
func CurrentGeneration(ctx context.Context, cl *opensearchapi.Client, names indices.Names) (int, error) {
	status, body, err := Raw(ctx, cl, http.MethodGet, "/_alias/"+url.PathEscape(names.Stacks()), nil)
	if err != nil {
		return 0, fmt.Errorf("read the alias %s: %w", names.Stacks(), err)
	}
	switch status {
	case http.StatusNotFound:
		return 0, nil // a physical index of that name, or nothing yet: generation 0
	case http.StatusOK:
	default:
		return 0, fmt.Errorf("read the alias %s: HTTP %d: %s", names.Stacks(), status, truncate(body, 300))
	}
	var resp map[string]json.RawMessage
	if err := json.Unmarshal(body, &resp); err != nil {
		return 0, fmt.Errorf("read the alias %s: parse answer: %w", names.Stacks(), err)
	}
	for index := range resp {
		if gen, _, ok := names.Generation(index); ok {
			return gen, nil
		}
	}
	return 0, fmt.Errorf("read the alias %s: it points to %s, not an index of this prefix", names.Stacks(), truncate(body, 300))
}

// Swap says what moving every name to one generation does.
type Swap struct {
	To      int
	Actions []map[string]any // the one _aliases request
	Added   []string         // names that had no index before
	Moved   []string         // names that pointed to another generation's index
	Removed []string         // generation-0 indices deleted by the swap (remove_index)
	Kept    []string         // names left on their generation: generation To has no index for them
}

// PlanSwap computes the single _aliases request that points every name for
// which generation to has an index to that index, but the names in keep,
// which stay where they are (listed in Kept). A name held by a
// generation-0 index can only become an alias once that index is gone, so
// the request deletes it (remove_index): in the same atomic step, so a
// reader sees the old index or the new alias, never neither.
func PlanSwap(l Layout, names indices.Names, to int, keep ...string) Swap {
	s := Swap{To: to}
	covered := map[string]bool{}
	for _, p := range l.Of(to) {
		if slices.Contains(keep, p.Name) {
			continue
		}
		covered[p.Name] = true
		old, serving := l.Serving(p.Name)
		switch {
		case serving && old.Index == p.Index:
			continue
		case serving && old.Gen == 0:
			s.Actions = append(s.Actions,
				map[string]any{"add": map[string]any{"index": p.Index, "alias": p.Name}},
				map[string]any{"remove_index": map[string]any{"index": old.Index}})
			s.Removed = append(s.Removed, old.Index)
		case serving:
			s.Actions = append(s.Actions,
				map[string]any{"remove": map[string]any{"index": old.Index, "alias": p.Name}},
				map[string]any{"add": map[string]any{"index": p.Index, "alias": p.Name}})
			s.Moved = append(s.Moved, p.Name)
		default:
			s.Actions = append(s.Actions, map[string]any{"add": map[string]any{"index": p.Index, "alias": p.Name}})
			s.Added = append(s.Added, p.Name)
		}
	}
	for _, p := range l {
		if p.Gen == to {
			continue
		}
		served := p.Aliases
		if p.Gen == 0 {
			served = append([]string{p.Name}, served...)
		}
		for _, name := range served {
			if !covered[name] && !slices.Contains(s.Kept, name) {
				s.Kept = append(s.Kept, name)
			}
		}
	}
	sort.Strings(s.Added)
	sort.Strings(s.Moved)
	sort.Strings(s.Removed)
	sort.Strings(s.Kept)
	return s
}

// Apply sends the swap as one _aliases request: OpenSearch applies all of
// its actions or none.
func (s Swap) Apply(ctx context.Context, cl *opensearchapi.Client) error {
	if len(s.Actions) == 0 {
		return nil
	}
	body, err := json.Marshal(map[string]any{"actions": s.Actions})
	if err != nil {
		return err
	}
	status, resp, err := Raw(ctx, cl, http.MethodPost, "/_aliases", body)
	if err != nil {
		return fmt.Errorf("swap aliases to generation %d: %w", s.To, err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("swap aliases to generation %d: HTTP %d: %s", s.To, status, truncate(resp, 500))
	}
	return nil
}

// DeleteUnserved deletes the physical indices of generation gen (>= 1) that
// no alias points to any more, and returns their names and those kept
// because a name still resolves to them.
func DeleteUnserved(ctx context.Context, cl *opensearchapi.Client, names indices.Names, gen int) (deleted, kept []string, err error) {
	if gen < 1 {
		return nil, nil, fmt.Errorf("delete generation %d: only generations from 1 on are deleted this way (a swap from generation 0 deletes its indices itself)", gen)
	}
	l, err := ReadLayout(ctx, cl, names)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range l.Of(gen) {
		if len(p.Aliases) > 0 {
			kept = append(kept, p.Index)
			continue
		}
		status, body, err := Raw(ctx, cl, http.MethodDelete, "/"+url.PathEscape(p.Index), nil)
		if err != nil {
			return deleted, kept, fmt.Errorf("delete index %s: %w", p.Index, err)
		}
		if status != http.StatusOK && status != http.StatusNotFound {
			return deleted, kept, fmt.Errorf("delete index %s: HTTP %d: %s", p.Index, status, truncate(body, 300))
		}
		deleted = append(deleted, p.Index)
	}
	return deleted, kept, nil
}

// CreateIndex creates index from its template; one that exists already is
// no error.
func CreateIndex(ctx context.Context, cl *opensearchapi.Client, index string) error {
	status, body, err := Raw(ctx, cl, http.MethodPut, "/"+url.PathEscape(index), nil)
	if err != nil {
		return fmt.Errorf("create index %s: %w", index, err)
	}
	if status != http.StatusOK && !isExists(body) {
		return fmt.Errorf("create index %s: HTTP %d: %s", index, status, truncate(body, 300))
	}
	return nil
}

// CreateAliasedIndex creates index with the alias alias in one request, so
// the name never resolves to an index without it. When another writer
// created the index first, it adds the alias (again: adding is idempotent).
func CreateAliasedIndex(ctx context.Context, cl *opensearchapi.Client, index, alias string) error {
	body, err := json.Marshal(map[string]any{"aliases": map[string]any{alias: map[string]any{}}})
	if err != nil {
		return err
	}
	status, resp, err := Raw(ctx, cl, http.MethodPut, "/"+url.PathEscape(index), body)
	switch {
	case err != nil:
		return fmt.Errorf("create index %s for %s: %w", index, alias, err)
	case status == http.StatusOK:
		return nil
	case !isExists(resp):
		return fmt.Errorf("create index %s for %s: HTTP %d: %s", index, alias, status, truncate(resp, 300))
	}
	add, err := json.Marshal(map[string]any{"actions": []any{map[string]any{"add": map[string]any{"index": index, "alias": alias}}}})
	if err != nil {
		return err
	}
	status, resp, err = Raw(ctx, cl, http.MethodPost, "/_aliases", add)
	if err != nil {
		return fmt.Errorf("alias %s to %s: %w", alias, index, err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("alias %s to %s: HTTP %d: %s", alias, index, status, truncate(resp, 300))
	}
	return nil
}

// isExists is true for the errors OpenSearch answers when an index or alias
// of that name exists already.
func isExists(body []byte) bool {
	s := string(body)
	return strings.Contains(s, "resource_already_exists_exception") || strings.Contains(s, "invalid_index_name_exception") && strings.Contains(s, "alias")
}

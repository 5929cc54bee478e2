// Package route is the writers' side of index generations (docs/STACKCTL.md):
// it sends a bulk writer's items, addressed by the names of indices.Names,
// to the physical index of the right generation.
package route

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
)

// Writer stores documents; *bulk.Writer is the real one.
type Writer interface {
	Write(ctx context.Context, items []bulk.Item) ([]bulk.Rejected, error)
}

// Router is the writers' side of index generations: it takes items
// addressed by the names of indices.Names and makes them land in the right
// physical index.
//
// Following the aliases (Generation 0, what the live services do), it
// writes to the names, so a swap moves its writes with the readers; before
// the first write to a name (a new day, a new month) that resolves to
// nothing, it creates the current generation's physical index with that
// alias. In generation 0 it creates nothing: the first write creates the
// index from its template, as before generations.
//
// Pinned to a generation (a reindex's temporary consumers), it writes to
// that generation's physical indices, created from the templates on the
// first write; a swap makes them serve.
type Router struct {
	cl    *opensearchapi.Client
	names indices.Names
	w     Writer
	gen   int

	mu    sync.Mutex
	ready map[string]bool // names known to resolve to an index
}

// New routes w's items; generation 0 follows the aliases, a positive one
// pins the writes to that generation.
func New(cl *opensearchapi.Client, names indices.Names, w Writer, generation int) *Router {
	return &Router{cl: cl, names: names, w: w, gen: generation, ready: map[string]bool{}}
}

// Write stores items as w does; rejected items keep the names they were
// given, so callers find their records.
func (r *Router) Write(ctx context.Context, items []bulk.Item) ([]bulk.Rejected, error) {
	if r.gen > 0 {
		return r.writePinned(ctx, items)
	}
	for i := range items {
		// Items come grouped by index more often than not.
		if i > 0 && items[i].Index == items[i-1].Index {
			continue
		}
		if err := r.ensure(ctx, items[i].Index); err != nil {
			return nil, err
		}
	}
	return r.w.Write(ctx, items)
}

func (r *Router) writePinned(ctx context.Context, items []bulk.Item) ([]bulk.Rejected, error) {
	routed := make([]bulk.Item, len(items))
	back := map[string]string{}
	for i, it := range items {
		phys := r.names.Physical(r.gen, it.Index)
		back[phys] = it.Index
		it.Index = phys
		routed[i] = it
	}
	rejected, err := r.w.Write(ctx, routed)
	for i := range rejected {
		if name, ok := back[rejected[i].Item.Index]; ok {
			rejected[i].Item.Index = name
		}
	}
	return rejected, err
}

// ensure makes name resolve to an index of the current generation, once per
// name and process. Transient failures are retried until ctx ends, as the
// bulk writer does.
func (r *Router) ensure(ctx context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready[name] {
		return nil
	}
	backoff := 100 * time.Millisecond
	for {
		err := r.create(ctx, name)
		if err == nil {
			r.ready[name] = true
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("prepare index %s: %w (last: %v)", name, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (r *Router) create(ctx context.Context, name string) error {
	status, _, err := opensearch.Raw(ctx, r.cl, http.MethodHead, "/"+url.PathEscape(name), nil)
	if err != nil {
		return err
	}
	if status == http.StatusOK {
		return nil // an alias or, in generation 0, the index itself
	}
	gen, err := opensearch.CurrentGeneration(ctx, r.cl, r.names)
	if err != nil {
		return err
	}
	phys := r.names.Physical(gen, name)
	if gen == 0 || phys == name {
		return nil // written as before generations: the template creates it
	}
	return opensearch.CreateAliasedIndex(ctx, r.cl, phys, name)
}

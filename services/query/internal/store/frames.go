package store

import (
	"context"
	"fmt"
	"sync"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// stackFrames are a stack's function names, root first, and their kinds
// (record.Kind*, "" for native code); kinds is nil when every frame is
// native, as in most stacks.
type stackFrames struct {
	names, kinds []string
}

// frames returns the function names of each stack, root first, and the
// frames' kinds of the stacks that have frames other than native ones.
// Unknown stack IDs get one frame naming that, so their value still shows.
func (s *Store) frames(ctx context.Context, ids []string) (names, kinds map[string][]string, err error) {
	names = make(map[string][]string, len(ids))
	kinds = map[string][]string{}
	add := func(id string, f stackFrames) {
		names[id] = f.names
		if f.kinds != nil {
			kinds[id] = f.kinds
		}
	}
	var missing []string
	for _, id := range ids {
		if id == "" {
			names[id] = []string{NoStack}
			continue
		}
		if f, ok := s.stacks.Get(id); ok {
			add(id, f)
			continue
		}
		missing = append(missing, id)
	}
	// All chunks are read before any is used: the names are small.
	err = readChunks(ctx, missing, len(missing), s.nameFrames, func(_ []string, frames map[string]stackFrames) {
		for id, f := range frames {
			add(id, f)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return names, kinds, nil
}

// StackNames hands the function names (root first) and kinds of ids to
// use a few chunks at a time (frames), so a caller merging a million stacks
// holds their values and the merged tree, not every stack's frames.
func (s *Store) StackNames(ctx context.Context, ids []string, use func(names, kinds map[string][]string)) error {
	const batch = fetchChunk * fetchParallel
	for start := 0; start < len(ids); start += batch {
		names, kinds, err := s.frames(ctx, ids[start:min(start+batch, len(ids))])
		if err != nil {
			return err
		}
		use(names, kinds)
	}
	return nil
}

// FrameName is the name a frame is shown by: its function, or for a
// frame stored without one its binary in brackets; the rollup's trees name
// frames the same way.
func FrameName(f indices.Frame) string { return indices.FrameName(f) }

const (
	// fetchChunk stays under OpenSearch's index.max_result_window (10000).
	fetchChunk    = 5000
	fetchParallel = 2
)

// readChunks reads ids fetchChunk at a time with read, fetchParallel
// chunks in flight, and hands each chunk's result to use in the order of
// ids. At most batch IDs (rounded up to whole chunks) are read before use
// is called, which bounds what is held. A cold flame graph of thousands of
// stacks is dominated by these reads.
func readChunks[T any](ctx context.Context, ids []string, batch int, read func(context.Context, []string) (T, error), use func([]string, T)) error {
	if len(ids) == 0 {
		return nil
	}
	batch = max(batch, fetchChunk)
	for start := 0; start < len(ids); start += batch {
		part := ids[start:min(start+batch, len(ids))]
		var chunks [][]string
		for i := 0; i < len(part); i += fetchChunk {
			chunks = append(chunks, part[i:min(i+fetchChunk, len(part))])
		}
		results := make([]T, len(chunks))
		errs := make([]error, len(chunks))
		sem := make(chan struct{}, fetchParallel)
		var wg sync.WaitGroup
		for i, chunk := range chunks {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				results[i], errs[i] = read(ctx, chunk)
			})
		}
		wg.Wait()
		for i, chunk := range chunks {
			if errs[i] != nil {
				return errs[i]
			}
			use(chunk, results[i])
		}
	}
	return nil
}

// storedStacks is the answer of a search of the stacks index by ID.
type storedStacks struct {
	Hits struct {
		Hits []struct {
			ID     string `json:"_id"`
			Source struct {
				Frames []indices.Frame `json:"frames"`
			} `json:"_source"`
		} `json:"hits"`
	} `json:"hits"`
}

// searchStacks reads the stacks of ids with the frame fields of includes.
// It searches with an ids query rather than _mget: the search fetch phase
// reads stored documents in index order, which with compressed stored
// fields was 4-6 times faster for thousands of IDs.
func (s *Store) searchStacks(ctx context.Context, ids, includes []string) (*storedStacks, error) {
	var resp storedStacks
	req := &Request{Size: len(ids), TrackTotalHits: false, Query: idsOf(ids), Source: &Source{Includes: includes}}
	if err := s.search(ctx, []string{s.names.Stacks()}, req, &resp, "hits.hits._id", "hits.hits._source"); err != nil {
		return nil, err
	}
	return &resp, nil
}

// nameFrames reads the frame names and kinds of ids into the cache; IDs
// the stacks index lacks get one UnknownStack frame.
func (s *Store) nameFrames(ctx context.Context, ids []string) (map[string]stackFrames, error) {
	resp, err := s.searchStacks(ctx, ids, []string{"frames.function", "frames.binary", "frames.kind"})
	if err != nil {
		return nil, fmt.Errorf("get stacks: %w", err)
	}
	out := make(map[string]stackFrames, len(ids))
	for _, d := range resp.Hits.Hits {
		n := len(d.Source.Frames)
		sf := stackFrames{names: make([]string, n)}
		for i, f := range d.Source.Frames {
			// Stored leaf first, as in pprof; trees read root first.
			sf.names[n-1-i] = FrameName(f)
			// Stacks stored before schema 2 have no kind: FrameKind reads
			// it from the binary, the pseudo-file's name.
			if k := f.FrameKind(); k != record.KindNative {
				if sf.kinds == nil {
					sf.kinds = make([]string, n)
				}
				sf.kinds[n-1-i] = k
			}
		}
		if n == 0 {
			sf.names = []string{NoStack}
		}
		s.stacks.Put(d.ID, sf, 0)
		out[d.ID] = sf
	}
	for _, id := range ids {
		if _, ok := out[id]; !ok {
			out[id] = stackFrames{names: []string{UnknownStack}}
		}
	}
	return out, nil
}

// fullFrames reads every stored field of the frames of ids, leaf first;
// IDs the stacks index lacks are left out.
func (s *Store) fullFrames(ctx context.Context, ids []string) (map[string][]indices.Frame, error) {
	resp, err := s.searchStacks(ctx, ids, []string{"frames"})
	if err != nil {
		return nil, fmt.Errorf("get stack frames: %w", err)
	}
	out := make(map[string][]indices.Frame, len(resp.Hits.Hits))
	for _, d := range resp.Hits.Hits {
		out[d.ID] = d.Source.Frames
	}
	return out, nil
}

// ReadFrames reads every stored field of the frames of ids (leaf first, as
// stored) and hands them to use a chunk at a time, in the order of ids, so
// only fetchChunk*fetchParallel stacks are held at once; IDs the stacks
// index lacks are missing from a chunk's map. Only the pprof export needs
// files and lines, so these never enter the cache, which holds names for
// the flame graphs.
func (s *Store) ReadFrames(ctx context.Context, ids []string, use func(chunk []string, frames map[string][]indices.Frame)) error {
	return readChunks(ctx, ids, fetchChunk*fetchParallel, s.fullFrames, use)
}

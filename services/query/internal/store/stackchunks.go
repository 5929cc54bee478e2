package store

import (
	"context"
	"slices"
)

// EachStackChunk reads every stack of the selection with its frames, at
// most MaxStacks stacks at a time: fn sees each stack once, in chunks
// whose Total is the whole selection's. Unlike Stacks, nothing is left out
// past MaxStacks; the frames held at once stay bounded, the time grows
// with the stacks. For sums over every stack (a keyword's functions).
func (s *Store) EachStackChunk(ctx context.Context, sel Selection, fn func(*Stacks) error) error {
	sv, err := s.everyStackValue(ctx, sel)
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(sv.Values))
	for id := range sv.Values {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for chunk := range slices.Chunk(ids, s.opts.MaxStacks) {
		frames, kinds, err := s.frames(ctx, chunk)
		if err != nil {
			return err
		}
		values := make(map[string]int64, len(chunk))
		for _, id := range chunk {
			values[id] = sv.Values[id]
		}
		part := StackValues{Values: values, Total: sv.Total, Source: sv.Source}
		if err := fn(&Stacks{StackValues: part, Frames: frames, Kinds: kinds}); err != nil {
			return err
		}
	}
	return nil
}

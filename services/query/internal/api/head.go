package api

import (
	"context"
	"errors"
	"log/slog"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// flameTree is the tree a flame graph of maxNodes nodes folds: the fleet
// day's head when one answers sel (store.FleetHead) and keeps at least
// maxNodes nodes (the first maxNodes nodes of a head are its whole
// tree's); else the merge of the fleet's hour heads when it proves the
// flame graph (hourHeadsTree); else sel's merged tree.
func (a *API) flameTree(ctx context.Context, sel store.Selection, maxNodes int) (*merged, error) {
	if maxNodes <= indices.HeadNodes {
		head, ok, err := a.store.FleetHead(ctx, sel)
		if err != nil {
			return nil, err
		}
		if ok {
			m, kept, err := decodeHead(head)
			switch {
			case err != nil:
				slog.Warn("fleet head does not decode: reading the day's trees", "err", err)
			case kept >= maxNodes || kept == m.nodes:
				return m, nil
			}
		}
		m, ok, err := a.hourHeadsTree(ctx, sel, maxNodes)
		if err != nil {
			return nil, err
		}
		if ok {
			return m, nil
		}
	}
	return a.selectionTree(ctx, sel)
}

// hourHeadsTree merges sel's hours from the fleet's hour heads (and whole
// trees where an hour has none) with its edges, and proves the flame graph
// of maxNodes nodes from them (proveKeep). ok is false when heads cannot
// answer sel or the proof fails: the caller then reads the whole trees.
func (a *API) hourHeadsTree(ctx context.Context, sel store.Selection, maxNodes int) (*merged, bool, error) {
	pm, source, ok, err := a.hourHeadsMerge(ctx, sel)
	if err != nil || !ok {
		return nil, false, err
	}
	m := &merged{root: pm.root, source: source}
	if len(pm.heads) == 0 {
		return m, true, nil // every head kept its whole hour
	}
	keep, proven := proveKeep(pm.root, maxNodes)
	if !proven {
		slog.Debug("hour heads do not prove the flame graph: reading the trees", "max_nodes", maxNodes, "heads", len(pm.heads))
		return nil, false, nil
	}
	m.keep = keep
	return m, true, nil
}

// hourHeadsMerge merges sel's hours from the fleet's hour heads (and whole
// trees where an hour has none) with its edges, bounded (pieceMerge.bound)
// for a proof. ok is false when heads cannot answer sel, or a head or tree
// does not decode (logged).
func (a *API) hourHeadsMerge(ctx context.Context, sel store.Selection) (*pieceMerge, string, bool, error) {
	pm := newPieceMerge()
	read, ok, err := a.store.FleetHourHeads(ctx, sel, pm.mergeDecoded, pm.merge)
	var bad *badTreeError
	var badHead *store.BadHeadError
	if errors.As(err, &bad) || errors.As(err, &badHead) {
		slog.Warn("hour head or tree does not decode: reading the trees", "err", err)
		return nil, "", false, nil
	}
	if err != nil || !ok {
		return nil, "", false, err
	}
	err = a.edgeStacks(ctx, read.Edges, func(v int64, names, kinds []string) { mergeStack(pm.root, v, names, kinds) })
	if err != nil {
		return nil, "", false, err
	}
	pm.bound()
	return pm, read.Source, true, nil
}

// headsMerge is sel's tree as a merge of fleet heads bounded for a proof:
// the day's fleet head (store.FleetHead) or the hour heads
// (hourHeadsMerge). ok is false when no head answers sel.
func (a *API) headsMerge(ctx context.Context, sel store.Selection) (*pieceMerge, string, bool, error) {
	head, ok, err := a.store.FleetHead(ctx, sel)
	if err != nil {
		return nil, "", false, err
	}
	if ok {
		pm := newPieceMerge()
		if err := pm.mergeHead(head); err == nil {
			pm.bound()
			return pm, "fleet_head", true, nil
		}
		slog.Warn("fleet head does not decode: reading the day's trees", "err", err)
	}
	return a.hourHeadsMerge(ctx, sel)
}

// decodeHead is a head as a tree whose nodes' folded values stand for the
// children it left out, and the number of nodes it kept.
func decodeHead(b []byte) (m *merged, kept int, err error) {
	h := &headTree{treeMerge: treeMerge{root: &node{name: "total"}}}
	h.path = append(h.path, h.root)
	nodes, self, total, err := indices.DecodeHead(b, indices.TreeLimits{}, h)
	if err != nil {
		return nil, 0, err
	}
	h.root.self, h.root.total = self, total
	return &merged{root: h.root, nodes: nodes, source: "fleet_head"}, h.kept, nil
}

// headTree builds a head's tree as treeMerge builds a tree's, counting the
// nodes the head kept.
type headTree struct {
	treeMerge
	kept int
}

func (h *headTree) Node(depth int, frame int32, self, total int64) {
	h.treeMerge.Node(depth, frame, self, total)
	h.kept++
}

// Folded is nothing to headTree: a node's folded value is its total less
// its self and kept children's totals, which is what flameKept shows.
func (h *headTree) Folded(int, int64) {}

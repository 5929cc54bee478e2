package api

import (
	"context"
	"log/slog"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// flameTree is the tree a flame graph of maxNodes nodes folds: the fleet
// day's head when one answers sel (store.FleetHead) and keeps at least
// maxNodes nodes (the first maxNodes nodes of a head are its whole
// tree's), else sel's merged tree.
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
	}
	return a.selectionTree(ctx, sel)
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

func (h *headTree) Folded(depth int, total int64) { h.path[depth-1].folded += total }

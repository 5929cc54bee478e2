package store

import (
	"container/list"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
)

// Head is a decoded head (indices.DecodeHead): what decoding it hands a
// visitor, kept so that Visit hands it again without inflating and
// decoding the document. Heads are read-only once decoded: one Head may
// be visited by many requests at once.
type Head struct {
	frames      []indices.TreeFrame
	nodes       []headNode // in decode order
	count       int        // the whole tree's node count
	self, total int64      // the root's
	bytes       int64      // what it holds in memory, about
}

// headNode is a kept node (frame >= 0) or the folded marker (frame -1) at
// depth.
type headNode struct {
	depth, frame int32
	self, total  int64
}

// BadHeadError is a head document that does not decode.
type BadHeadError struct{ Err error }

func (e *BadHeadError) Error() string { return fmt.Sprintf("decode head: %v", e.Err) }
func (e *BadHeadError) Unwrap() error { return e.Err }

// DecodeHead decodes an encoded head once, for Visit.
func DecodeHead(b []byte) (*Head, error) {
	// Recorded into a scratch slice, then copied once at its size: the
	// slice grown by append from nothing cost a head of 20,000 nodes half
	// again its decoding's CPU.
	scratch := scratchNodes.Get().(*[]headNode)
	h := &Head{nodes: (*scratch)[:0]}
	count, self, total, err := indices.DecodeHead(b, indices.TreeLimits{}, (*headRecorder)(h))
	*scratch = h.nodes[:0]
	if err != nil {
		scratchNodes.Put(scratch)
		return nil, &BadHeadError{err}
	}
	h.count, h.self, h.total = count, self, total
	h.nodes = slices.Clone(h.nodes)
	scratchNodes.Put(scratch)
	h.bytes = int64(cap(h.nodes))*24 + 128
	for _, f := range h.frames {
		h.bytes += int64(len(f.Name)+len(f.Kind)) + 32
	}
	return h, nil
}

// scratchNodes holds the slices DecodeHead records into.
var scratchNodes = sync.Pool{New: func() any { s := make([]headNode, 0, 2*indices.HeadNodes); return &s }}

// Visit hands v what indices.DecodeHead hands it, in the same order, and
// returns what it returns: the whole tree's node count and the root's
// self and total.
func (h *Head) Visit(v indices.HeadVisitor) (nodes int, rootSelf, rootTotal int64) {
	v.Frames(h.frames)
	for _, n := range h.nodes {
		if n.frame < 0 {
			v.Folded(int(n.depth), n.total)
			continue
		}
		v.Node(int(n.depth), n.frame, n.self, n.total)
	}
	return h.count, h.self, h.total
}

// Bytes is about what h holds in memory: what the head cache charges.
func (h *Head) Bytes() int64 { return h.bytes }

// headRecorder records what indices.DecodeHead visits into a Head.
type headRecorder Head

func (r *headRecorder) Frames(f []indices.TreeFrame) { r.frames = f }
func (r *headRecorder) Node(depth int, frame int32, self, total int64) {
	r.nodes = append(r.nodes, headNode{depth: int32(depth), frame: frame, self: self, total: total})
}
func (r *headRecorder) Folded(depth int, total int64) {
	r.nodes = append(r.nodes, headNode{depth: int32(depth), frame: -1, total: total})
}

// headVersion names one version of a head document: OpenSearch gives a
// document a new _seq_no (and, after a primary's failover, _primary_term)
// on every write, so a version's tree never changes. value and sources
// (what the freshness checks read) are part of it, so that an index
// deleted and created again under the same name, whose documents start
// their sequence numbers again, would need a document of the same _id,
// _seq_no, _primary_term, value and sources (the fingerprint of its
// trees' versions) to be taken for another.
type headVersion struct {
	Index, ID          string
	SeqNo, PrimaryTerm int64
	Value              int64
	Sources            string
}

// DefaultHeadCacheBytes is Options.HeadCacheBytes' default: a decoded
// head of 20,000 nodes (indices.HeadNodes) of the 1,000-host benchmark
// fleet takes about 1.2 MB (its nodes and frame names), so a now-24h's 35
// heads (23 hours, 5 windows, 7 minutes) take 41.6 MB
// (BenchmarkProveFleetWindowHeads) and 128 MiB holds them for two
// profile types, or one type with an hour's new minute heads.
const DefaultHeadCacheBytes = 128 << 20

// headCache keeps decoded heads by version, the least recently used
// dropped first past its bytes. A closed window's or hour's head is
// written once (rewritten only by late profiles, as a new version), so a
// now-24h asked again reads from OpenSearch and decodes only the heads
// written since: the newest minutes', and each hour's once.
type headCache struct {
	max int64 // bytes; 0: nothing is kept
	mu  sync.Mutex
	ll  *list.List // of *headEntry, most recent first
	m   map[headVersion]*list.Element
	cur int64
}

type headEntry struct {
	key  headVersion
	head *Head
}

func newHeadCache(maxBytes int64) *headCache {
	return &headCache{max: max(maxBytes, 0), ll: list.New(), m: map[headVersion]*list.Element{}}
}

// get is the head of version k when kept.
func (c *headCache) get(k headVersion) *Head {
	if c.max == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return nil
	}
	c.ll.MoveToFront(e)
	return e.Value.(*headEntry).head
}

func (c *headCache) put(k headVersion, h *Head) {
	if c.max == 0 || h.bytes > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		c.ll.MoveToFront(e)
		return
	}
	c.m[k] = c.ll.PushFront(&headEntry{key: k, head: h})
	c.cur += h.bytes
	for c.cur > c.max {
		e := c.ll.Back()
		old := e.Value.(*headEntry)
		c.ll.Remove(e)
		delete(c.m, old.key)
		c.cur -= old.head.bytes
	}
}

// headHit is a hit of readHeads' search: the head's version and tree.
type headHit struct {
	Index       string `json:"_index"`
	ID          string `json:"_id"`
	SeqNo       int64  `json:"_seq_no"`
	PrimaryTerm int64  `json:"_primary_term"`
	Source      struct {
		Tree    []byte `json:"tree"`
		Value   int64  `json:"value"`
		Sources string `json:"sources"`
	} `json:"_source"`
}

// readHeads hands use the decoded head of each fleet head version in
// known (as the freshness checks read them, without their trees) from
// the cache, and reads the others by _id, pageSize per scroll page,
// decoding and caching them. A head read whose version is not the one
// checked (rewritten in between) is used as read, as before the cache:
// the compactor made it from its window's trees as they were then. It
// returns how many heads it handed over: fewer than len(known) when some
// were deleted in between.
func (s *Store) readHeads(ctx context.Context, idx []string, sel Selection, known []headVersion, pageSize int, use func(*Head) error) (int, error) {
	n := 0
	var ids []string
	for _, k := range known {
		if h := s.heads.get(k); h != nil {
			if err := use(h); err != nil {
				return n, err
			}
			n++
			continue
		}
		ids = append(ids, k.ID)
	}
	if len(ids) == 0 {
		return n, nil
	}
	m, err := s.scrollHeads(ctx, idx, sel, indices.KindFleetHead, termsOf("_id", ids), pageSize, use)
	return n + m, err
}

// scrollHeads is scrollTrees for heads: each head document's tree is
// decoded (or found decoded in the cache by its version) and handed to
// use; a tree that does not decode fails the read with a *BadHeadError.
func (s *Store) scrollHeads(ctx context.Context, idx []string, sel Selection, kind string, when Query, pageSize int, use func(*Head) error) (int, error) {
	read, err := s.treeScroll(ctx, idx, sel, kind, when, pageSize, true, "tree", "value", "sources")
	if err != nil {
		return 0, err
	}
	n := 0
	var useErr error
	err = opensearch.ScrollEach(ctx, read, func(p *opensearch.ScrollPage[headHit]) error {
		for _, hit := range p.Hits.Hits {
			k := headVersion{Index: hit.Index, ID: hit.ID, SeqNo: hit.SeqNo, PrimaryTerm: hit.PrimaryTerm, Value: hit.Source.Value, Sources: hit.Source.Sources}
			h := s.heads.get(k)
			if h == nil {
				if h, useErr = DecodeHead(hit.Source.Tree); useErr != nil {
					return useErr
				}
				s.heads.put(k, h)
			}
			if useErr = use(h); useErr != nil {
				return useErr
			}
			n++
		}
		return nil
	})
	return n, scrollErr("read heads", err, useErr)
}

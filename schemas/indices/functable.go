package indices

import (
	"cmp"
	"compress/flate"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
)

// Function tables (rollup kind "function_table"): a top table sums every
// node of a selection by function name, which no head can give (a head
// keeps no names of the nodes it left out), so a fleet day's top read 41 MB
// of day trees. A function table is a partition tree's top table, computed
// by the rollup from the tree it writes: every function's self (the self of
// its nodes) and total (the total of its nodes with no ancestor of the same
// name: recursion counts once per stack), in the order a top table ranks
// them (self, then total, heavier first, then name). A table keeps its
// first keep functions and, for the rest, the largest self and the largest
// total any of them has, so the query can prove which functions rank first
// (services/query/internal/api, toptables.go) or read the trees.
//
// Encoding, version 1:
//
//	version  byte 1
//	body     deflated (RFC 1951):
//	  scale      uvarint, the GCD of every value below (1 when all are 0)
//	  total      uvarint, the tree's total / scale
//	  functions  uvarint, the tree's distinct function names
//	  kept       uvarint, the functions listed (<= functions)
//	  rest self  uvarint, the largest self of those not listed / scale
//	  rest total uvarint, the largest total of those not listed / scale
//	  kept times: name (uvarint length, bytes), self / scale, total / scale
//
// A function table is written beside the partition tree it was made from:
// an hour table records the tree's TreeDigest in its sources (and the hour
// tree its digest), a day table the same sources as its day tree.

// KindFunctionTable is a partition tree's function table: one per (type,
// partition, hour) with resolution 1h, and per (type, partition, day) with
// resolution 1d.
const KindFunctionTable = "function_table"

// FunctionTableVersion is the first byte of an encoded function table.
const FunctionTableVersion = 1

// TableFunctions is how many functions a table lists: every function of an
// hour partition tree of the 1,000-host benchmark fleet (about 51,000), and
// every function of its day trees with a self above the mutated leaves'
// (docs/QUERY.md, "Top tables from function tables").
const TableFunctions = 50_000

// TableFunction is one function of a table.
type TableFunction struct {
	Name        string
	Self, Total int64
}

// FunctionTable is a decoded (or computed) function table.
type FunctionTable struct {
	Total     int64 // the tree's total
	Functions int   // distinct functions in the tree
	// Kept are the first functions in rank order (RankFunctions).
	Kept []TableFunction
	// RestSelf and RestTotal bound the self and total of every function
	// not in Kept (0 when Kept holds them all).
	RestSelf, RestTotal int64
}

// Complete says whether the table lists every function of its tree.
func (t *FunctionTable) Complete() bool { return len(t.Kept) == t.Functions }

// RankFunctions is the order of a top table: self, then total, heavier
// first, then name.
func RankFunctions(a, b TableFunction) int {
	return cmp.Or(cmp.Compare(b.Self, a.Self), cmp.Compare(b.Total, a.Total), cmp.Compare(a.Name, b.Name))
}

// TreeFunctions sums an encoded tree by function name (every function, in
// rank order, with no bound needed).
func TreeFunctions(tree []byte, lim TreeLimits) (*FunctionTable, error) {
	s := &functionSummer{byName: map[string]int32{}}
	_, total, err := DecodeTree(tree, lim, s)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(s.fns, RankFunctions)
	return &FunctionTable{Total: total, Functions: len(s.fns), Kept: s.fns}, nil
}

type functionSummer struct {
	byName map[string]int32
	fns    []TableFunction
	onPath []int32 // per function, times on the path
	frames []int32 // the tree's frames' functions
	path   []int32 // functions on the path to the last node
}

func (s *functionSummer) Frames(frames []TreeFrame) {
	s.frames = make([]int32, len(frames))
	for i, f := range frames {
		j, ok := s.byName[f.Name]
		if !ok {
			j = int32(len(s.fns))
			s.byName[f.Name] = j
			s.fns = append(s.fns, TableFunction{Name: f.Name})
			s.onPath = append(s.onPath, 0)
		}
		s.frames[i] = j
	}
}

func (s *functionSummer) Node(depth int, frame int32, self, total int64) {
	for len(s.path) > depth-1 {
		s.onPath[s.path[len(s.path)-1]]--
		s.path = s.path[:len(s.path)-1]
	}
	f := s.frames[frame]
	s.fns[f].Self += self
	if s.onPath[f] == 0 {
		s.fns[f].Total += total
	}
	s.onPath[f]++
	s.path = append(s.path, f)
}

// Encode encodes the table's first keep functions (all when keep is 0 or
// more than it holds) and the bound on the others. Kept must be in rank
// order and hold every function (as TreeFunctions returns it), or be a
// decoded table.
func (t *FunctionTable) Encode(keep int) []byte {
	kept := t.Kept
	restSelf, restTotal := t.RestSelf, t.RestTotal
	if keep > 0 && keep < len(kept) {
		for _, f := range kept[keep:] {
			restSelf, restTotal = max(restSelf, f.Self), max(restTotal, f.Total)
		}
		kept = kept[:keep]
	}
	scale := gcd(t.Total, gcd(restSelf, restTotal))
	for _, f := range kept {
		scale = gcd(scale, gcd(f.Self, f.Total))
	}
	if scale <= 0 {
		scale = 1
	}
	body := make([]byte, 0, 16*len(kept)+64)
	u := func(v int64) { body = binary.AppendUvarint(body, uint64(v)) }
	u(scale)
	u(t.Total / scale)
	u(int64(t.Functions))
	u(int64(len(kept)))
	u(restSelf / scale)
	u(restTotal / scale)
	for _, f := range kept {
		u(int64(len(f.Name)))
		body = append(body, f.Name...)
		u(f.Self / scale)
		u(f.Total / scale)
	}
	return deflated(FunctionTableVersion, body, flate.DefaultCompression)
}

// DecodeFunctionTable reads an encoded function table, bounded by lim as
// a tree is (MaxBytes inflated, MaxFrames functions, MaxFrameBytes a
// name). It checks that the functions are in rank order (so each is listed
// once), that none's self is above its total or its total above the
// table's, and that the bound on the rest is no heavier than the last one
// listed.
func DecodeFunctionTable(b []byte, lim TreeLimits) (*FunctionTable, error) {
	lim = lim.withDefaults()
	if len(b) == 0 || b[0] != FunctionTableVersion {
		return nil, fmt.Errorf("%w: not a version %d function table", ErrTreeInvalid, FunctionTableVersion)
	}
	body, err := inflated(b[1:], lim.MaxBytes)
	if err != nil {
		return nil, err
	}
	d := treeDecoder{b: body}
	scale := d.uvarint()
	if d.err != nil {
		return nil, d.err
	}
	if scale == 0 || scale > maxTreeValue {
		return nil, fmt.Errorf("%w: scale %d", ErrTreeInvalid, scale)
	}
	value := func() int64 {
		x := d.uvarint()
		if x > maxTreeValue/scale {
			d.fail("value %d times scale %d too large", x, scale)
			return 0
		}
		return int64(x * scale)
	}
	t := &FunctionTable{Total: value()}
	functions, kept := d.uvarint(), d.uvarint()
	t.RestSelf, t.RestTotal = value(), value()
	if d.err != nil {
		return nil, d.err
	}
	// A listed function takes at least three bytes.
	switch {
	case functions > uint64(lim.MaxFrames):
		return nil, fmt.Errorf("%w: %d functions, limit %d", ErrTreeTooLarge, functions, lim.MaxFrames)
	case kept > functions || kept > uint64(len(body)-d.off)/3:
		return nil, fmt.Errorf("%w: %d of %d functions listed in %d bytes", ErrTreeInvalid, kept, functions, len(body))
	case kept == functions && (t.RestSelf != 0 || t.RestTotal != 0):
		return nil, fmt.Errorf("%w: every function listed and a bound on the rest", ErrTreeInvalid)
	case t.RestSelf > t.RestTotal:
		return nil, fmt.Errorf("%w: the rest's self above its total", ErrTreeInvalid)
	}
	t.Functions = int(functions)
	t.Kept = make([]TableFunction, kept)
	for i := range t.Kept {
		f := &t.Kept[i]
		f.Name = d.str(lim.MaxFrameBytes)
		f.Self, f.Total = value(), value()
		if d.err != nil {
			return nil, d.err
		}
		if f.Self > f.Total || f.Total > t.Total {
			return nil, fmt.Errorf("%w: function %q: self %d, total %d, table total %d", ErrTreeInvalid, f.Name, f.Self, f.Total, t.Total)
		}
		if i > 0 && RankFunctions(t.Kept[i-1], *f) >= 0 {
			return nil, fmt.Errorf("%w: function %q out of order", ErrTreeInvalid, f.Name)
		}
	}
	if d.off != len(body) {
		return nil, fmt.Errorf("%w: %d bytes after the functions", ErrTreeInvalid, len(body)-d.off)
	}
	if n := len(t.Kept); n > 0 && t.RestSelf > t.Kept[n-1].Self || t.RestTotal > t.Total {
		return nil, fmt.Errorf("%w: the rest's bound (self %d, total %d) above the functions listed", ErrTreeInvalid, t.RestSelf, t.RestTotal)
	}
	return t, nil
}

// TreeDigest is a fingerprint of an encoded tree: an hour partition tree
// records its own (RollupDoc.Digest, doc values) and its function table
// the digest of the tree it was made from (Sources), so the query trusts a
// table only while its tree is the one stored.
func TreeDigest(tree []byte) string {
	sum := sha256.Sum256(tree)
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

package indices

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// A samples document holds one label set's part of one profile (a process,
// mostly): every stack it was seen in and the value of each. OpenSearch pays
// tens of bytes for every document, so one document per stack would cost
// more than the samples it holds (a stack is seen about twice in a 10 s
// profile at 19 Hz); packed, a stack costs a few bytes. See
// schemas/opensearch.md.
//
// stack_id lists the stack IDs, sorted and unique (a keyword's doc values
// keep that order); stack_values packs their values in the same order:
//
//	uvarint scale, then one uvarint(value / scale) per stack ID
//
// scale is the greatest common divisor of the values: a CPU profile's values
// are multiples of its sampling period, so most take one byte.

// errStackValues is wrapped by every decoding error.
var errStackValues = errors.New("bad stack_values")

// SetStacks fills StackIDs and StackValues from parallel ids and values, in
// any order. IDs must be unique and non-empty, values non-negative.
func (d *SampleDoc) SetStacks(ids []string, values []int64) error {
	var err error
	d.StackIDs, d.StackValues, err = packStacks(ids, values)
	return err
}

// packStacks is ids sorted and their values packed in that order.
func packStacks(ids []string, values []int64) ([]string, []byte, error) {
	if len(ids) != len(values) {
		return nil, nil, fmt.Errorf("%d stack IDs, %d values", len(ids), len(values))
	}
	if len(ids) == 0 {
		return nil, nil, nil
	}
	// The indexer calls this for every samples document, so it sorts a
	// permutation keyed by the IDs' first bytes (one integer compare
	// decides almost every pair of hashed IDs) and packs in that order
	// without a sorted copy of the values.
	order := stackOrder(ids)
	sorted := make([]string, len(ids))
	var scale int64
	for i := range ids {
		o := i
		if order != nil {
			o = int(order[i].at)
		}
		sorted[i] = ids[o]
		if ids[o] == "" {
			return nil, nil, errors.New("empty stack ID")
		}
		if i > 0 && sorted[i] == sorted[i-1] {
			return nil, nil, fmt.Errorf("stack %s listed twice", ids[o])
		}
	}
	// Values in the order PackStackValues would see them, so that the same
	// negative value is the one reported.
	for i := range values {
		v := values[i]
		if order != nil {
			v = values[order[i].at]
		}
		if v < 0 {
			return nil, nil, fmt.Errorf("negative sample value %d", v)
		}
		scale = gcd(scale, v)
	}
	if scale == 0 {
		scale = 1
	}
	// Most values take one byte; the scale up to five.
	packed := make([]byte, 0, len(values)+binary.MaxVarintLen64)
	packed = binary.AppendUvarint(packed, uint64(scale))
	for i := range values {
		v := values[i]
		if order != nil {
			v = values[order[i].at]
		}
		packed = binary.AppendUvarint(packed, uint64(v/scale))
	}
	return sorted, packed, nil
}

// stackRank is one ID's place in stackOrder: at is its index in ids, prefix
// its first 8 bytes big-endian (zero-padded), which orders IDs as strings do
// unless equal.
type stackRank struct {
	prefix uint64
	at     int32
}

// stackOrder is the permutation that sorts ids, or nil when they are
// already sorted.
func stackOrder(ids []string) []stackRank {
	if slices.IsSorted(ids) {
		return nil
	}
	order := make([]stackRank, len(ids))
	for i, id := range ids {
		var b [8]byte
		copy(b[:], id)
		order[i] = stackRank{prefix: binary.BigEndian.Uint64(b[:]), at: int32(i)}
	}
	slices.SortFunc(order, func(a, b stackRank) int {
		if a.prefix != b.prefix {
			return cmp.Compare(a.prefix, b.prefix)
		}
		return strings.Compare(ids[a.at], ids[b.at])
	})
	return order
}

// PackStackValues appends the packed form of values to dst.
func PackStackValues(dst []byte, values []int64) ([]byte, error) {
	var scale int64
	for _, v := range values {
		if v < 0 {
			return dst, fmt.Errorf("negative sample value %d", v)
		}
		scale = gcd(scale, v)
	}
	if scale == 0 {
		scale = 1
	}
	dst = binary.AppendUvarint(dst, uint64(scale))
	for _, v := range values {
		dst = binary.AppendUvarint(dst, uint64(v/scale))
	}
	return dst, nil
}

// UnpackStackValues decodes n values packed by PackStackValues.
func UnpackStackValues(b []byte, n int) ([]int64, error) {
	scale, k := binary.Uvarint(b)
	if k <= 0 || scale == 0 || scale > 1<<63-1 {
		return nil, fmt.Errorf("%w: scale", errStackValues)
	}
	b = b[k:]
	out := make([]int64, 0, min(n, len(b)))
	for i := range n {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, fmt.Errorf("%w: value %d of %d", errStackValues, i+1, n)
		}
		if v > (1<<63-1)/scale {
			return nil, fmt.Errorf("%w: value %d overflows", errStackValues, i+1)
		}
		out = append(out, int64(v*scale))
		b = b[k:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after %d values", errStackValues, len(b), n)
	}
	return out, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Stacks returns the document's stack IDs and values. A document written
// before stack_values existed has one stack ID and its value in Value.
func (d *SampleDoc) Stacks() ([]string, []int64, error) {
	return unpackStacks(d.StackIDs, d.StackValues, d.Value)
}

// unpackStacks is the values of ids packed in b; without b, the one stack
// of ids has value.
func unpackStacks(ids []string, b []byte, value int64) ([]string, []int64, error) {
	if len(b) == 0 {
		if len(ids) == 1 {
			return ids, []int64{value}, nil
		}
		if len(ids) > 1 {
			return nil, nil, fmt.Errorf("%w: %d stack IDs without values", errStackValues, len(ids))
		}
		return nil, nil, nil
	}
	v, err := UnpackStackValues(b, len(ids))
	return ids, v, err
}

// painlessStackValues decodes stack_values in a Painless script, as
// UnpackStackValues does; d is the script's doc. Documents written before
// stack_values existed (one stack ID, its value in value) read the same.
const painlessStackValues = `
long[] stackValues(def d, int n) {
  long[] out = new long[n];
  if (!d.containsKey('stack_values') || d['stack_values'].size() == 0) {
    if (n == 1) { out[0] = d['value'].value; }
    return out;
  }
  BytesRef b = d['stack_values'].value;
  byte[] a = b.bytes;
  int p = b.offset;
  int end = b.offset + b.length;
  long scale = 0;
  for (int i = -1; i < n && p < end; i++) {
    long v = 0;
    long mul = 1;
    while (p < end) {
      int x = a[p];
      p = p + 1;
      v = v + (x & 127) * mul;
      if (x >= 0) { break; }
      mul = mul * 128;
    }
    if (i < 0) { scale = v; } else { out[i] = v * scale; }
  }
  return out;
}
`

// StackSumsScript is a scripted_metric aggregation that sums the samples
// documents it runs over by stack: its value is an object from stack ID to
// summed value. Values of documents not covered by their stacks (memory
// documents have none) are summed under "".
func StackSumsScript() map[string]any {
	return stackSumsScript("", "", nil)
}

// summedIf wraps a script's body in a test of the Painless expression
// summed, when there is one (Painless refuses a constant condition).
func summedIf(summed, body string) string {
	if summed == "" {
		return body
	}
	return "\nif (" + summed + ") {" + body + "}\n"
}

// stackSumsScript is StackSumsScript over the documents for which the
// Painless expression summed holds (all when empty), with functions
// defined before the map script and params.
func stackSumsScript(functions, summed string, params map[string]any) map[string]any {
	script := map[string]any{
		"init_script": "state.m = new HashMap();",
		"map_script": painlessStackValues + functions + summedIf(summed, `
def ids = doc['stack_id'];
int n = ids.size();
long[] v = stackValues(doc, n);
long rest = 0;
if (doc['value'].size() > 0) { rest = doc['value'].value; }
for (int i = 0; i < n; i++) {
  String k = ids.get(i);
  rest = rest - v[i];
  def o = state.m.get(k);
  if (o == null) { state.m.put(k, v[i]); } else { state.m.put(k, o + v[i]); }
}
if (rest != 0) {
  def o = state.m.get('');
  if (o == null) { state.m.put('', rest); } else { state.m.put('', o + rest); }
}`),
		"combine_script": "return state.m;",
		"reduce_script": `
Map r = new HashMap();
for (m in states) {
  if (m == null) { continue; }
  for (e in m.entrySet()) {
    def o = r.get(e.getKey());
    if (o == null) { r.put(e.getKey(), e.getValue()); } else { r.put(e.getKey(), o + e.getValue()); }
  }
}
return r;`,
	}
	if params != nil {
		script["params"] = params
	}
	return script
}

// StacksValueScript is the script of a sum aggregation that adds, per
// samples document, the values of the given stacks only.
func StacksValueScript(ids []string) map[string]any {
	return stacksValueScript(ids, "", "", nil)
}

// stacksValueScript is StacksValueScript over the documents for which
// summed holds (0 for the others), as stackSumsScript.
func stacksValueScript(ids []string, functions, summed string, params map[string]any) map[string]any {
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	p := map[string]any{"ids": set}
	for k, v := range params {
		p[k] = v
	}
	return map[string]any{
		"source": painlessStackValues + functions + `
long s = 0;` + summedIf(summed, `
def ids = doc['stack_id'];
int n = ids.size();
long[] v = stackValues(doc, n);
for (int i = 0; i < n; i++) {
  if (params.ids.containsKey(ids.get(i))) { s = s + v[i]; }
}`) + `
return s;`,
		"params": p,
	}
}

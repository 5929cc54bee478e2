package pprofwire

// IndexIDs maps the IDs of a profile table's entries (mappings, functions,
// locations) to their index+1, reusing dst. IDs must be unique, non-zero and
// dense enough for a slice (at most 4 per entry plus 64): pprof's encoder
// numbers them 1..n. False for anything else, which a decoder leaves to
// google/pprof's parser.
func IndexIDs(dst []int32, ids []uint64) ([]int32, bool) {
	size := 1
	for _, x := range ids {
		if x == 0 || x > uint64(4*len(ids)+64) {
			return dst, false
		}
		size = max(size, int(x)+1)
	}
	if cap(dst) < size {
		dst = make([]int32, size)
	}
	dst = dst[:size]
	clear(dst)
	for i, x := range ids {
		if dst[x] != 0 {
			return dst, false
		}
		dst[x] = int32(i + 1)
	}
	return dst, true
}

// Lookup is the index of id in a table built by IndexIDs, or -1.
func Lookup(t []int32, id uint64) int {
	if id >= uint64(len(t)) {
		return -1
	}
	return int(t[id]) - 1
}

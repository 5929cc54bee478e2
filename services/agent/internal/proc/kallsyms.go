package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Kallsyms resolves kernel addresses to function names. Names live in one
// string with offsets, so the ~120k symbols of a kernel cost a few MiB.
type Kallsyms struct {
	addrs []uint64
	ends  []uint32 // end offset of each name in names
	names string
}

// ParseKallsyms reads /proc/kallsyms, keeping text symbols. Without
// privileges the kernel prints zero addresses: that is an error, since no
// kernel frame could be resolved.
func ParseKallsyms(r io.Reader) (*Kallsyms, error) {
	// Names go straight into one builder: a []string of 120k names would
	// double the agent's peak RSS at start-up.
	var (
		addrs []uint64
		ends  []uint32
		names strings.Builder
	)
	sorted := true
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Bytes()
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 || len(line) < sp+4 || line[sp+2] != ' ' {
			continue
		}
		switch line[sp+1] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		name := line[sp+3:]
		if i := bytes.IndexByte(name, '\t'); i >= 0 {
			name = name[:i] // drop the [module] suffix
		}
		addr, err := strconv.ParseUint(string(line[:sp]), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("parse kallsyms address %q: %w", line[:sp], err)
		}
		if addr == 0 {
			continue
		}
		if n := len(addrs); n > 0 && addr < addrs[n-1] {
			sorted = false
		}
		addrs = append(addrs, addr)
		names.Write(name)
		ends = append(ends, uint32(names.Len()))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read kallsyms: %w", err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("kallsyms: no symbol addresses visible (kptr_restrict?): run the agent as root or with CAP_SYSLOG")
	}
	k := &Kallsyms{addrs: addrs, ends: ends, names: names.String()}
	if !sorted {
		k = k.sorted()
	}
	return k, nil
}

// sorted returns k ordered by address (module symbols can come unordered).
func (k *Kallsyms) sorted() *Kallsyms {
	idx := make([]int, len(k.addrs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return k.addrs[idx[a]] < k.addrs[idx[b]] })
	out := &Kallsyms{addrs: make([]uint64, len(idx)), ends: make([]uint32, len(idx))}
	var b strings.Builder
	b.Grow(len(k.names))
	for j, i := range idx {
		out.addrs[j] = k.addrs[i]
		b.WriteString(k.name(i))
		out.ends[j] = uint32(b.Len())
	}
	out.names = b.String()
	return out
}

func (k *Kallsyms) name(i int) string {
	start := uint32(0)
	if i > 0 {
		start = k.ends[i-1]
	}
	return k.names[start:k.ends[i]]
}

// Resolve returns the function containing addr, or "" when it lies below the
// first symbol.
func (k *Kallsyms) Resolve(addr uint64) string {
	i := sort.Search(len(k.addrs), func(i int) bool { return k.addrs[i] > addr }) - 1
	if i < 0 {
		return ""
	}
	return k.name(i)
}

// Len is the number of symbols.
func (k *Kallsyms) Len() int { return len(k.addrs) }

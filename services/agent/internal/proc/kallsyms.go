package proc

import (
	"bufio"
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
	type sym struct {
		addr uint64
		name string
	}
	var syms []sym
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		a, rest, ok := strings.Cut(line, " ")
		if !ok || len(rest) < 3 || rest[1] != ' ' {
			continue
		}
		switch rest[0] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		name := rest[2:]
		if i := strings.IndexByte(name, '\t'); i >= 0 {
			name = name[:i] // drop the [module] suffix
		}
		addr, err := strconv.ParseUint(a, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("parse kallsyms address %q: %w", a, err)
		}
		if addr == 0 {
			continue
		}
		syms = append(syms, sym{addr, name})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read kallsyms: %w", err)
	}
	if len(syms) == 0 {
		return nil, fmt.Errorf("kallsyms: no symbol addresses visible (kptr_restrict?): run the agent as root or with CAP_SYSLOG")
	}
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].addr < syms[j].addr })
	k := &Kallsyms{addrs: make([]uint64, len(syms)), ends: make([]uint32, len(syms))}
	var b strings.Builder
	for i, s := range syms {
		k.addrs[i] = s.addr
		b.WriteString(s.name)
		k.ends[i] = uint32(b.Len())
	}
	k.names = b.String()
	return k, nil
}

// Resolve returns the function containing addr, or "" when it lies below the
// first symbol.
func (k *Kallsyms) Resolve(addr uint64) string {
	i := sort.Search(len(k.addrs), func(i int) bool { return k.addrs[i] > addr }) - 1
	if i < 0 {
		return ""
	}
	start := uint32(0)
	if i > 0 {
		start = k.ends[i-1]
	}
	return k.names[start:k.ends[i]]
}

// Len is the number of symbols.
func (k *Kallsyms) Len() int { return len(k.addrs) }

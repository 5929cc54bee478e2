// Package hotspot names the Java frames of HotSpot JVMs without JVM flags:
// it reads the structure descriptions libjvm.so exports for its
// serviceability agent (gHotSpotVMStructs, gHotSpotVMTypes and the
// constants) from the process, gives the BPF walker the code cache's layout
// (bpf/profiler/hotspot.h), and turns the Method* the walker recorded for a
// Java frame into class and method names by reading the process's memory.
// Everything read from the process is hostile input: reads are bounded,
// pointers checked, results cached per (pid, Method*) in a bounded LRU.
package hotspot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Errors, checked with errors.Is.
var (
	// ErrNotJVM: the process runs no HotSpot the agent recognizes.
	ErrNotJVM = errors.New("not a hotspot process")
	// ErrUnsupported: a HotSpot whose tables lack what the walker needs.
	ErrUnsupported = errors.New("unsupported hotspot")
	// ErrInvalid: memory or a file that does not hold what it should.
	ErrInvalid = errors.New("invalid hotspot data")
	// ErrNotReady: a JVM still starting (no code cache yet); try later.
	ErrNotReady = errors.New("hotspot not started yet")
	// ErrTooLarge: a table past its limit.
	ErrTooLarge = errors.New("hotspot table too large")
)

// Field is one entry of gHotSpotVMStructs: a field's offset in its type
// or, for a static field, its address.
type Field struct {
	Offset  uint64
	Address uint64
	Static  bool
}

// VMStructs is what the JVM describes of itself: fields by "Type.field",
// type sizes by name, integer and long constants by name.
type VMStructs struct {
	Fields    map[string]Field
	Types     map[string]uint64
	Ints      map[string]int64
	Longs     map[string]int64
	readBytes int
}

// TableLimits bound what is read of the tables.
type TableLimits struct {
	MaxEntries   int // per table (default 16384; HotSpot 17 has about 2,500 fields)
	MaxName      int // bytes of one name (default 256)
	MaxReadBytes int // bytes read for all tables and names (default 8 MiB)
	MaxStride    int // an entry's size (default 256)
}

// DefaultTableLimits are the agent's.
var DefaultTableLimits = TableLimits{MaxEntries: 16384, MaxName: 256, MaxReadBytes: 8 << 20, MaxStride: 256}

// Exported symbol names: the table pointers and their entry layouts.
const (
	symStructs   = "gHotSpotVMStructs"
	symTypes     = "gHotSpotVMTypes"
	symInts      = "gHotSpotVMIntConstants"
	symLongs     = "gHotSpotVMLongConstants"
	symPrefix    = "gHotSpotVM"
	maxSymLength = 48
)

// tableSymbols are the exported symbols ReadVMStructs uses; their runtime
// addresses are its input.
var tableSymbols = []string{
	symStructs, symTypes, symInts, symLongs,
	"gHotSpotVMStructEntryArrayStride", "gHotSpotVMStructEntryTypeNameOffset", "gHotSpotVMStructEntryFieldNameOffset",
	"gHotSpotVMStructEntryIsStaticOffset", "gHotSpotVMStructEntryOffsetOffset", "gHotSpotVMStructEntryAddressOffset",
	"gHotSpotVMTypeEntryArrayStride", "gHotSpotVMTypeEntryTypeNameOffset", "gHotSpotVMTypeEntrySizeOffset",
	"gHotSpotVMIntConstantEntryArrayStride", "gHotSpotVMIntConstantEntryNameOffset", "gHotSpotVMIntConstantEntryValueOffset",
	"gHotSpotVMLongConstantEntryArrayStride", "gHotSpotVMLongConstantEntryNameOffset", "gHotSpotVMLongConstantEntryValueOffset",
}

// tableReader reads process memory within a byte budget.
type tableReader struct {
	mem    io.ReaderAt
	lim    TableLimits
	budget int
}

func (r *tableReader) read(addr uint64, n int) ([]byte, error) {
	if n > r.budget {
		return nil, fmt.Errorf("%w: more than %d bytes of tables", ErrTooLarge, r.lim.MaxReadBytes)
	}
	if addr < 4096 || addr >= 1<<47 {
		return nil, fmt.Errorf("%w: address %#x", ErrInvalid, addr)
	}
	r.budget -= n
	b := make([]byte, n)
	if _, err := r.mem.ReadAt(b, int64(addr)); err != nil {
		return nil, fmt.Errorf("%w: read %d bytes at %#x: %v", ErrInvalid, n, addr, err)
	}
	return b, nil
}

func (r *tableReader) u64(addr uint64) (uint64, error) {
	b, err := r.read(addr, 8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// str reads a NUL-terminated name of at most MaxName bytes, in pieces
// that do not cross a page: a name may end just before unmapped memory.
func (r *tableReader) str(addr uint64) (string, error) {
	const piece, page = 64, 4096
	var name []byte
	for len(name) < r.lim.MaxName {
		n := min(piece, r.lim.MaxName-len(name), int(page-addr%page))
		b, err := r.read(addr, n)
		if err != nil {
			return "", err
		}
		if i := bytes.IndexByte(b, 0); i >= 0 {
			return string(append(name, b[:i]...)), nil
		}
		name = append(name, b...)
		addr += uint64(n)
	}
	return "", fmt.Errorf("%w: name at %#x longer than %d bytes", ErrInvalid, addr, r.lim.MaxName)
}

// layout is one table's entry layout: the stride and the named offsets.
type layout struct {
	stride  uint64
	offsets []uint64
}

func (r *tableReader) layout(syms map[string]uint64, stride string, offsets ...string) (layout, error) {
	var l layout
	var err error
	if l.stride, err = r.u64(syms[stride]); err != nil {
		return l, fmt.Errorf("%s: %w", stride, err)
	}
	if l.stride == 0 || l.stride > uint64(r.lim.MaxStride) {
		return l, fmt.Errorf("%w: %s %d", ErrInvalid, stride, l.stride)
	}
	for _, name := range offsets {
		o, err := r.u64(syms[name])
		if err != nil {
			return l, fmt.Errorf("%s: %w", name, err)
		}
		if o+8 > l.stride {
			return l, fmt.Errorf("%w: %s %d past stride %d", ErrInvalid, name, o, l.stride)
		}
		l.offsets = append(l.offsets, o)
	}
	return l, nil
}

// entries calls fn with each entry of the table whose pointer is at
// symbol, until the entry whose first offset (a name) holds NULL.
func (r *tableReader) entries(syms map[string]uint64, symbol string, l layout, fn func(e []byte) error) error {
	base, err := r.u64(syms[symbol])
	if err != nil {
		return fmt.Errorf("%s: %w", symbol, err)
	}
	const batch = 64
	for i := 0; ; i += batch {
		if i >= r.lim.MaxEntries {
			return fmt.Errorf("%w: %s has more than %d entries", ErrTooLarge, symbol, r.lim.MaxEntries)
		}
		n := min(batch, r.lim.MaxEntries-i)
		b, err := r.read(base+uint64(i)*l.stride, n*int(l.stride))
		if err != nil {
			// The last batch may run past readable memory: entry by entry.
			b = nil
		}
		for j := 0; j < n; j++ {
			var e []byte
			if b != nil {
				e = b[uint64(j)*l.stride : uint64(j+1)*l.stride]
			} else if e, err = r.read(base+uint64(i+j)*l.stride, int(l.stride)); err != nil {
				return fmt.Errorf("%s entry %d: %w", symbol, i+j, err)
			}
			if binary.LittleEndian.Uint64(e[l.offsets[0]:]) == 0 {
				return nil
			}
			if err := fn(e); err != nil {
				return fmt.Errorf("%s entry %d: %w", symbol, i+j, err)
			}
		}
	}
}

// ReadVMStructs reads the four tables from mem, given the runtime
// addresses of the exported symbols (tableSymbols), within lim.
func ReadVMStructs(mem io.ReaderAt, syms map[string]uint64, lim TableLimits) (*VMStructs, error) {
	for _, s := range tableSymbols {
		if syms[s] == 0 {
			return nil, fmt.Errorf("%w: no symbol %s", ErrNotJVM, s)
		}
	}
	r := &tableReader{mem: mem, lim: lim, budget: lim.MaxReadBytes}
	le := binary.LittleEndian
	vm := &VMStructs{Fields: map[string]Field{}, Types: map[string]uint64{}, Ints: map[string]int64{}, Longs: map[string]int64{}}

	sl, err := r.layout(syms, "gHotSpotVMStructEntryArrayStride", "gHotSpotVMStructEntryTypeNameOffset", "gHotSpotVMStructEntryFieldNameOffset",
		"gHotSpotVMStructEntryIsStaticOffset", "gHotSpotVMStructEntryOffsetOffset", "gHotSpotVMStructEntryAddressOffset")
	if err != nil {
		return nil, err
	}
	if sl.offsets[2]+4 > sl.stride {
		return nil, fmt.Errorf("%w: isStatic offset %d", ErrInvalid, sl.offsets[2])
	}
	err = r.entries(syms, symStructs, sl, func(e []byte) error {
		typ, err := r.str(le.Uint64(e[sl.offsets[0]:]))
		if err != nil {
			return err
		}
		field, err := r.str(le.Uint64(e[sl.offsets[1]:]))
		if err != nil {
			return err
		}
		vm.Fields[typ+"."+field] = Field{
			Static:  le.Uint32(e[sl.offsets[2]:]) != 0,
			Offset:  le.Uint64(e[sl.offsets[3]:]),
			Address: le.Uint64(e[sl.offsets[4]:]),
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	tl, err := r.layout(syms, "gHotSpotVMTypeEntryArrayStride", "gHotSpotVMTypeEntryTypeNameOffset", "gHotSpotVMTypeEntrySizeOffset")
	if err != nil {
		return nil, err
	}
	err = r.entries(syms, symTypes, tl, func(e []byte) error {
		typ, err := r.str(le.Uint64(e[tl.offsets[0]:]))
		if err != nil {
			return err
		}
		vm.Types[typ] = le.Uint64(e[tl.offsets[1]:])
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, c := range []struct {
		table, stride, name, value string
		into                       map[string]int64
		int32                      bool
	}{
		{symInts, "gHotSpotVMIntConstantEntryArrayStride", "gHotSpotVMIntConstantEntryNameOffset", "gHotSpotVMIntConstantEntryValueOffset", vm.Ints, true},
		{symLongs, "gHotSpotVMLongConstantEntryArrayStride", "gHotSpotVMLongConstantEntryNameOffset", "gHotSpotVMLongConstantEntryValueOffset", vm.Longs, false},
	} {
		cl, err := r.layout(syms, c.stride, c.name, c.value)
		if err != nil {
			return nil, err
		}
		err = r.entries(syms, c.table, cl, func(e []byte) error {
			name, err := r.str(le.Uint64(e[cl.offsets[0]:]))
			if err != nil {
				return err
			}
			if c.int32 {
				c.into[name] = int64(int32(le.Uint32(e[cl.offsets[1]:])))
			} else {
				c.into[name] = int64(le.Uint64(e[cl.offsets[1]:]))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	vm.readBytes = lim.MaxReadBytes - r.budget
	return vm, nil
}

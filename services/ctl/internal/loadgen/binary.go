package loadgen

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"

	"github.com/stackstream/stackstream/schemas/debuginfo"
)

// Binary is a simulated build of one mapped file: a synthetic build ID whose
// symbols are published on the debuginfo topic, so the symbolizer names its
// frames from addresses as it does for a real agent's.
type Binary struct {
	BuildID string
	File    string // mapping file
	Size    uint64 // bytes mapped
	// vbase is the virtual address of file offset 0: 0x400000 for an
	// executable (mapped there), 0 for a shared library (mapped anywhere).
	vbase uint64
	addr  map[string]uint64 // function name -> virtual address of its symbol
	value []byte            // the debuginfo record value
}

// Layout of a simulated binary: symbols of symbolSize bytes from
// textOffset on; a sampled address lies pcOffset into its symbol.
const (
	execBase   = 0x400000
	textOffset = 0x1000
	symbolSize = 0x100
	pcOffset   = 0x10
	pageSize   = 0x1000
)

// newBinary lays out functions (deduplicated, sorted) and encodes their
// debuginfo. key names the build: different keys, different build IDs.
func newBinary(key, file string, shared bool, functions []string) (*Binary, error) {
	sum := sha256.Sum256([]byte(key))
	b := &Binary{BuildID: hex.EncodeToString(sum[:20]), File: file, addr: map[string]uint64{}}
	if !shared {
		b.vbase = execBase
	}
	sort.Strings(functions)
	d := &debuginfo.File{BuildID: b.BuildID, Kind: debuginfo.KindSymbols}
	for _, fn := range functions {
		if _, ok := b.addr[fn]; ok {
			continue
		}
		a := b.vbase + textOffset + uint64(len(d.Symbols))*symbolSize
		b.addr[fn] = a
		d.Symbols = append(d.Symbols, debuginfo.Symbol{Addr: a, Size: symbolSize, Name: fn})
	}
	b.Size = (textOffset + uint64(len(d.Symbols))*symbolSize + pageSize - 1) / pageSize * pageSize
	d.Segments = []debuginfo.Segment{{Offset: 0, Vaddr: b.vbase, Filesz: b.Size}}
	v, err := debuginfo.Encode(d)
	if err != nil {
		return nil, fmt.Errorf("encode debuginfo of %s: %w", file, err)
	}
	b.value = v
	return b, nil
}

// Debuginfo is the value published on the debuginfo topic, keyed by BuildID.
func (b *Binary) Debuginfo() []byte { return b.value }

// pc is the sampled address of fn in a mapping of b starting at start.
func (b *Binary) pc(fn string, start uint64) uint64 {
	return b.addr[fn] - b.vbase + start + pcOffset
}

package hotspot

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// ReadLimits bound what is read of one method.
type ReadLimits struct {
	MaxSymbol int // bytes of a class, method or file name (default 1 KiB)
}

// DefaultReadLimits are the agent's.
var DefaultReadLimits = ReadLimits{MaxSymbol: 1024}

// Method is what names a Java frame.
type Method struct {
	Class     string // java.lang.String; nested: Outer$Inner
	Name      string // the method's name: <init> for constructors
	Signature string // (J)J
	File      string // the source file the class was compiled from, "" if none
}

// Function is "Class.method", how the profile names the frame.
func (m *Method) Function() string { return m.Class + "." + m.Name }

// ReadMethod reads the Method at address method of a process with layout
// l from mem: Method -> ConstMethod (name and signature indexes) ->
// ConstantPool (the symbols, the holder class, the source file) -> Klass
// name. Every pointer and index is checked before it is followed.
func ReadMethod(mem io.ReaderAt, l Layout, method uint64, lim ReadLimits) (*Method, error) {
	r := &memReader{mem: mem}
	cm := r.u64(method + l.MethodConstMethod)
	if r.err == nil && !pointer(cm) {
		return nil, fmt.Errorf("%w: Method %#x: ConstMethod %#x", ErrInvalid, method, cm)
	}
	cp := r.u64(cm + l.ConstMethodPool)
	if r.err == nil && !pointer(cp) {
		return nil, fmt.Errorf("%w: Method %#x: ConstantPool %#x", ErrInvalid, method, cp)
	}
	nameIdx, sigIdx := r.u16(cm+l.ConstMethodName), r.u16(cm+l.ConstMethodSig)
	length := int32(r.u32(cp + l.PoolLength))
	holder := r.u64(cp + l.PoolHolder)
	fileIdx := r.u16(cp + l.PoolSourceFile)
	if r.err != nil {
		return nil, r.err
	}
	if length <= 0 || length > 1<<16 || int32(nameIdx) >= length || int32(sigIdx) >= length || int32(fileIdx) >= length || !pointer(holder) {
		return nil, fmt.Errorf("%w: Method %#x: pool of %d entries, indexes %d %d %d, holder %#x", ErrInvalid, method, length, nameIdx, sigIdx, fileIdx, holder)
	}
	entry := func(i uint16) uint64 { return r.u64(cp + l.PoolSize + 8*uint64(i)) }
	m := &Method{}
	var err error
	if m.Name, err = readSymbol(r, l, entry(nameIdx), lim); err != nil {
		return nil, fmt.Errorf("method name: %w", err)
	}
	if m.Signature, err = readSymbol(r, l, entry(sigIdx), lim); err != nil {
		return nil, fmt.Errorf("method signature: %w", err)
	}
	class, err := readSymbol(r, l, r.u64(holder+l.KlassName), lim)
	if err != nil {
		return nil, fmt.Errorf("class name: %w", err)
	}
	m.Class = strings.ReplaceAll(class, "/", ".")
	if fileIdx != 0 {
		// No SourceFile attribute: index 0. A bad file name costs only itself.
		m.File, _ = readSymbol(r, l, entry(fileIdx), lim)
		r.err = nil
	}
	if m.Name == "" || m.Class == "" {
		return nil, fmt.Errorf("%w: Method %#x: empty name", ErrInvalid, method)
	}
	return m, nil
}

func pointer(v uint64) bool { return v >= 4096 && v < 1<<47 && v&7 == 0 }

// readSymbol reads a Symbol: a u2 length and modified UTF-8 bytes, cut to
// lim.MaxSymbol; bytes that are not UTF-8 make it invalid.
func readSymbol(r *memReader, l Layout, sym uint64, lim ReadLimits) (string, error) {
	if r.err != nil {
		return "", r.err
	}
	if !pointer(sym) {
		return "", fmt.Errorf("%w: Symbol %#x", ErrInvalid, sym)
	}
	n := int(r.u16(sym + l.SymbolLength))
	if n > lim.MaxSymbol {
		n = lim.MaxSymbol
	}
	if n == 0 {
		return "", r.err
	}
	b := r.bytes(sym+l.SymbolBody, n)
	if r.err != nil {
		return "", r.err
	}
	for !utf8.Valid(b) && n-len(b) < utf8.UTFMax && len(b) > 0 {
		b = b[:len(b)-1] // a character cut by the limit
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("%w: Symbol %#x is not UTF-8", ErrInvalid, sym)
	}
	return string(b), nil
}

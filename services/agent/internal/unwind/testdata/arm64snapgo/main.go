// An arm64 Go program for TestArm64WalkSnapshotGo (arm64qemu_test.go): in
// main.leaf <- main.mid <- main.main it records its registers (snap, in
// assembly) and copies its goroutine's stack, then writes them to
// os.Args[1] with its /proc/self/maps, in testdata/arm64snap.c's format.
package main

import (
	"encoding/binary"
	"os"
	"unsafe"
)

// snap records pc, sp, x29 and x30 at its own body: a frameless leaf.
func snap(regs *[4]uint64)

var (
	regs  [4]uint64
	top   uintptr // above main.main's frame: runtime.main and goexit
	stack [1 << 16]byte
	n     uintptr
	sink  uint64
)

//go:noinline
func leaf(x uint64) uint64 {
	snap(&regs)
	// No call from here to the copy's end: the stack stays where it is.
	// From 16 bytes below sp: Go saves a frame's x29 at its sp-8.
	base := uintptr(regs[1]) - 16
	for n = 0; base+n < top && n < uintptr(len(stack)); n += 8 {
		*(*uint64)(unsafe.Pointer(&stack[n])) = *(*uint64)(unsafe.Pointer(base + n))
	}
	return x*3 + 1
}

//go:noinline
func mid(x uint64) uint64 {
	var buf [40]uint64 // a frame of its own
	for i := range buf {
		buf[i] = x + uint64(i)
	}
	return leaf(buf[x%40]) + buf[3]
}

func main() {
	var here uint64
	top = uintptr(unsafe.Pointer(&here)) + 2048
	sink += mid(uint64(len(os.Args)))
	out := binary.LittleEndian.AppendUint64(nil, regs[0])
	for _, v := range []uint64{regs[1], regs[2], regs[3], regs[1] - 16, uint64(n)} {
		out = binary.LittleEndian.AppendUint64(out, v)
	}
	out = append(out, stack[:n]...)
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		os.Exit(3)
	}
	if err := os.WriteFile(os.Args[1], append(out, maps...), 0o644); err != nil {
		os.Exit(4)
	}
}

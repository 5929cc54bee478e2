// Package profiler holds the eBPF CPU sampler: the C program and its bpf2go
// output (committed, so building the agent needs no clang).
package profiler

// The include path adds the multiarch directory where Debian keeps asm/types.h
// for the UAPI headers; arm64's UAPI headers come from linux-libc-dev-arm64-cross.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go@v0.22.0 -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target amd64 -type sample_key -type sample_value -type unwind_row -type unwind_mapping_key -type unwind_mapping -type unwound_stack -type python_proc -type v8_proc -type hotspot_proc -type hotspot_heap -type offcpu_key -type offcpu_start Profile profile.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go@v0.22.0 -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/aarch64-linux-gnu/include" -target arm64 -type sample_key -type sample_value -type unwind_row -type unwind_mapping_key -type unwind_mapping -type unwound_stack -type python_proc -type v8_proc -type hotspot_proc -type hotspot_heap -type offcpu_key -type offcpu_start Profile profile.bpf.c

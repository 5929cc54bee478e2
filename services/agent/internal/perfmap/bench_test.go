package perfmap

import (
	"fmt"
	"strings"
	"testing"
)

// javaLikeMap is a perf map of n HotSpot-like entries (a large service has
// tens of thousands of compiled methods).
func javaLikeMap(n int) []byte {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "0x%016x 0x%016x java.lang.Object com.example.service.module%d.Handler%d.handleRequest(java.lang.Object, long)\n", 0x7f0000000000+uint64(i)*0x400, 0x300, i%97, i)
	}
	return []byte(b.String())
}

// BenchmarkParse: a JVM's whole map read again after Compiler.perfmap.
func BenchmarkParse(b *testing.B) {
	for _, n := range []int{1000, 50000} {
		data := javaLikeMap(n)
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			var tab *Table
			for b.Loop() {
				tab, _ = Parse(data, DefaultLimits)
			}
			b.ReportMetric(float64(tab.Bytes())/float64(n), "table-bytes/entry")
		})
	}
}

// BenchmarkAppend: a node map growing by 100 entries between reads of a
// 50,000-entry table (the merge, not a full sort).
func BenchmarkAppend(b *testing.B) {
	base := javaLikeMap(50000)
	r := NewReader(DefaultLimits)
	r.Apply(Chunk{Data: base, Size: int64(len(base)), EOF: true})
	var more strings.Builder
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&more, "%x 100 JS:*fn%d /srv/app.js:%d:1\n", 0x1000+i*0x100, i, i)
	}
	add := []byte(more.String())
	// One append first: the arena has its spare room, as in steady state.
	r.Apply(Chunk{From: r.state.Offset, Data: add, Size: r.state.Offset + int64(len(add)), EOF: true, Dev: r.state.Dev, Ino: r.state.Ino, Head: r.state.Head})
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		rr := *r
		rr.table.entries = append([]entry(nil), r.table.entries...)
		b.StartTimer()
		rr.Apply(Chunk{From: rr.state.Offset, Data: add, Size: rr.state.Offset + int64(len(add)), EOF: true, Dev: rr.state.Dev, Ino: rr.state.Ino, Head: rr.state.Head})
	}
}

func BenchmarkLookup(b *testing.B) {
	tab, _ := Parse(javaLikeMap(50000), DefaultLimits)
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		i = (i + 7919) % 50000
		if _, ok := tab.Lookup(0x7f0000000000 + i*0x400 + 0x10); !ok {
			b.Fatal("miss")
		}
	}
}

package pyroscope

import (
	"runtime"
	"testing"
)

// allocBytes runs fn and returns the bytes it allocated.
func allocBytes(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// FuzzParseName: any name parses or fails with ErrInvalid, within a bounded
// multiple of its size.
func FuzzParseName(f *testing.F) {
	for _, s := range []string{"app.cpu{a=b,c=d}", "{", "a{b=c", "x.y.z.inuse_space{k=v}", "a{,,=,}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var n Name
		var err error
		alloc := allocBytes(func() { n, err = ParseName(s) })
		if err != nil {
			return
		}
		if n.App == "" || len(n.Tags) > MaxTags {
			t.Fatalf("ParseName(%q) = %+v", s, n)
		}
		if limit := uint64(64*len(s) + 8192); alloc > limit {
			t.Fatalf("ParseName of %d bytes allocated %d, limit %d", len(s), alloc, limit)
		}
	})
}

// FuzzParseFolded: any body parses into a valid profile within the limits,
// or fails, and allocates a bounded multiple of its size.
func FuzzParseFolded(f *testing.F) {
	for _, s := range []string{"a;b;c 12\n", "a 1\r\na;b 2\n", " 3\n", ";;; 4\n", "a;b\n", "x 99999999999999999999\n"} {
		f.Add([]byte(s))
	}
	l := FoldedLimits{MaxSamples: 64, MaxDepth: 32, MaxFunctions: 128, MaxFrameBytes: 256}
	f.Fuzz(func(t *testing.T, body []byte) {
		var err error
		alloc := allocBytes(func() {
			var p interface{ CheckValid() error }
			pp, perr := ParseFolded(body, cpuSpec(), l)
			err = perr
			if perr == nil {
				p = pp
				if verr := p.CheckValid(); verr != nil {
					t.Fatalf("invalid profile from %q: %v", body, verr)
				}
				if len(pp.Sample) > l.MaxSamples || len(pp.Function) > l.MaxFunctions {
					t.Fatalf("limits exceeded: %d samples, %d functions", len(pp.Sample), len(pp.Function))
				}
			}
		})
		_ = err
		if limit := uint64(2048*len(body) + 16384); alloc > limit {
			t.Fatalf("ParseFolded of %d bytes allocated %d, limit %d", len(body), alloc, limit)
		}
	})
}

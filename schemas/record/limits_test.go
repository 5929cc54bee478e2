package record

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// pb appends protobuf fields, to write profiles the pprof writer would not:
// hostile ones, and ones that hold only one kind of element.
type pb []byte

func (b pb) varint(field int, v uint64) pb {
	b = binary.AppendUvarint(b, uint64(field)<<3)
	return binary.AppendUvarint(b, v)
}

func (b pb) bytes(field int, data []byte) pb {
	b = binary.AppendUvarint(b, uint64(field)<<3|2)
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

func (b pb) packed(field int, vs ...uint64) pb {
	var d []byte
	for _, v := range vs {
		d = binary.AppendUvarint(d, v)
	}
	return b.bytes(field, d)
}

func (b pb) str(s string) pb { return b.bytes(fieldProfileStringTable, []byte(s)) }

// Strings of baseProfile.
const (
	strCPU = 1
	strNS  = 2
	strKey = 3
	strVal = 4
)

// baseProfile is a valid profile (one sample type, one location and
// function, the string table) that a test adds elements to.
func baseProfile() pb {
	var b pb
	b = b.str("").str("cpu").str("nanoseconds").str("k").str("v")
	b = b.bytes(fieldProfileSampleType, pb{}.varint(1, strCPU).varint(2, strNS))
	b = b.bytes(fieldProfileFunction, pb{}.varint(1, 1).varint(2, strCPU))
	b = b.bytes(fieldProfileLocation, pb{}.varint(1, 1).bytes(fieldLocationLine, pb{}.varint(1, 1)))
	return b
}

func sample(values int, locs []uint64, labels int) []byte {
	s := pb{}.packed(fieldSampleValue, make([]uint64, values)...)
	if len(locs) > 0 {
		s = s.packed(fieldSampleLocationID, locs...)
	}
	for range labels {
		s = s.bytes(fieldSampleLabel, pb{}.varint(1, strKey).varint(2, strVal))
	}
	return s
}

func repeat(n int, v uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// unlimited is far above anything the tests build.
func unlimited() Limits {
	const big = 1 << 30
	return Limits{big, big, big, big, big, big, big, big, big, big, big, big, big, big, big}
}

// allocated is the heap f allocates, in bytes.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestUndefinedLocationIsInvalid is the record that stopped the symbolizer:
// a sample naming a location the profile does not define decoded to a nil
// *profile.Location, and every consumer walking the stack panicked.
func TestUndefinedLocationIsInvalid(t *testing.T) {
	var raw pb
	raw = raw.str("").str("cpu").str("nanoseconds")
	raw = raw.bytes(fieldProfileSampleType, pb{}.varint(1, strCPU).varint(2, strNS))
	raw = raw.bytes(fieldProfileSample, pb{}.packed(fieldSampleLocationID, 7).packed(fieldSampleValue, 10))
	raw = raw.varint(9, 1) // time_nanos
	value := gzipLevel(t, raw, gzip.BestCompression)
	if len(value) > 128 {
		t.Fatalf("repro is %d bytes, want a small record", len(value))
	}
	p, err := DecodeProfile(value)
	if !errors.Is(err, ErrInvalidProfile) {
		t.Fatalf("DecodeProfile(%d-byte record) = %v, %v; want ErrInvalidProfile", len(value), p, err)
	}
	if !strings.Contains(err.Error(), "nil location") {
		t.Fatalf("error %q does not say what is wrong", err)
	}
	t.Logf("%d-byte record: %v", len(value), err)
}

func TestDecodeProfileInvalid(t *testing.T) {
	tests := []struct {
		name string
		raw  pb
		want string
	}{
		{"value count below sample types", baseProfile().bytes(fieldProfileSample, sample(2, nil, 0)).bytes(fieldProfileSample, sample(1, nil, 0)), "sample 0 has 2 values"},
		{"one sample differs", baseProfile().bytes(fieldProfileSample, sample(1, nil, 0)).bytes(fieldProfileSample, sample(3, nil, 0)), "sample 1 has 3 values"},
		{"line with undefined function", baseProfile().bytes(fieldProfileLocation, pb{}.varint(1, 2).bytes(fieldLocationLine, pb{}.varint(1, 9))), "nil function"},
		{"duplicate location id", baseProfile().bytes(fieldProfileLocation, pb{}.varint(1, 1)), "multiple locations"},
		{"two period types", baseProfile().bytes(fieldProfilePeriodType, nil).bytes(fieldProfilePeriodType, nil), "period_type given 2 times"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeProfile(gzipLevel(t, tt.raw, gzip.BestSpeed))
			if !errors.Is(err, ErrInvalidProfile) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeProfile = %v, want ErrInvalidProfile saying %q", err, tt.want)
			}
		})
	}
}

// TestDecodeProfileLimits: one case per limit, refused at limit+1 with an
// error naming it, the count and the limit, accepted at the limit.
func TestDecodeProfileLimits(t *testing.T) {
	const n = 50
	samples := func(k int, s []byte) pb {
		b := baseProfile()
		for range k {
			b = b.bytes(fieldProfileSample, s)
		}
		return b
	}
	withSampleTypes := func(b pb, k int) pb {
		for range k - 1 { // baseProfile has one
			b = b.bytes(fieldProfileSampleType, nil)
		}
		return b
	}
	tests := []struct {
		name  string
		limit int
		set   func(*Limits, int)
		build func(k int) pb // a valid profile holding k of the limited thing
		want  string
	}{
		{"decompressed bytes", len(baseProfile()) + 100, func(l *Limits, v int) { l.MaxDecompressedBytes = v }, func(k int) pb {
			return baseProfile().bytes(99, make([]byte, k-len(baseProfile())-3)) // 2 bytes of key, 1 of length
		}, "decompressed bytes"},
		{"sample types", n, func(l *Limits, v int) { l.MaxSampleTypes = v }, func(k int) pb {
			return withSampleTypes(baseProfile(), k)
		}, "sample types"},
		{"values of a sample", n, func(l *Limits, v int) { l.MaxSampleTypes = v }, func(k int) pb {
			// The sample comes first, so its values are counted before
			// the sample types are.
			b := pb{}.bytes(fieldProfileSample, sample(k, nil, 0))
			return withSampleTypes(append(b, baseProfile()...), k)
		}, "values of sample 0"},
		{"samples", n, func(l *Limits, v int) { l.MaxSamples = v }, func(k int) pb { return samples(k, sample(1, []uint64{1}, 1)) }, "samples"},
		{"locations of a sample", n, func(l *Limits, v int) { l.MaxLocationsPerSample = v }, func(k int) pb {
			return samples(1, sample(1, repeat(k, 1), 0))
		}, "locations of sample 0"},
		{"location references", 10 * n, func(l *Limits, v int) { l.MaxSampleLocations = v }, func(k int) pb {
			return samples(k/10, sample(1, repeat(10, 1), 0)).bytes(fieldProfileSample, sample(1, repeat(k%10, 1), 0))
		}, "location references of all samples"},
		{"labels of a sample", n, func(l *Limits, v int) { l.MaxLabelsPerSample = v }, func(k int) pb { return samples(1, sample(1, nil, k)) }, "labels of sample 0"},
		{"labels", 10 * n, func(l *Limits, v int) { l.MaxLabels = v }, func(k int) pb {
			return samples(k/10, sample(1, nil, 10)).bytes(fieldProfileSample, sample(1, nil, k%10))
		}, "labels of all samples"},
		{"mappings", n, func(l *Limits, v int) { l.MaxMappings = v }, func(k int) pb {
			b := baseProfile()
			for i := range k {
				b = b.bytes(fieldProfileMapping, pb{}.varint(1, uint64(i+1)))
			}
			return b
		}, "mappings"},
		{"locations", n, func(l *Limits, v int) { l.MaxLocations = v }, func(k int) pb {
			b := baseProfile()
			for i := range k - 1 {
				b = b.bytes(fieldProfileLocation, pb{}.varint(1, uint64(i+2)))
			}
			return b
		}, "locations"},
		{"lines", n, func(l *Limits, v int) { l.MaxLines = v }, func(k int) pb {
			loc := pb{}.varint(1, 2)
			for range k - 1 {
				loc = loc.bytes(fieldLocationLine, pb{}.varint(1, 1))
			}
			return baseProfile().bytes(fieldProfileLocation, loc)
		}, "lines of all locations"},
		{"functions", n, func(l *Limits, v int) { l.MaxFunctions = v }, func(k int) pb {
			b := baseProfile()
			for i := range k - 1 {
				b = b.bytes(fieldProfileFunction, pb{}.varint(1, uint64(i+2)))
			}
			return b
		}, "functions"},
		{"strings", n, func(l *Limits, v int) { l.MaxStrings = v }, func(k int) pb {
			b := baseProfile()
			for range k - 5 {
				b = b.str("x")
			}
			return b
		}, "strings"},
		{"one string", n, func(l *Limits, v int) { l.MaxStringBytes = v }, func(k int) pb {
			return baseProfile().str(strings.Repeat("x", k))
		}, "bytes of string 5"},
		{"comments", n, func(l *Limits, v int) { l.MaxComments = v }, func(k int) pb {
			return baseProfile().packed(fieldProfileComment, repeat(k-1, 1)...).varint(fieldProfileComment, 1)
		}, "comments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := DefaultLimits()
			tt.set(&l, tt.limit)
			if _, err := DecodeProfileLimits(gzipLevel(t, tt.build(tt.limit), gzip.BestSpeed), l); err != nil {
				t.Fatalf("at the limit: %v", err)
			}
			over := tt.build(tt.limit + 1)
			_, err := DecodeProfileLimits(gzipLevel(t, over, gzip.BestSpeed), l)
			want := fmt.Sprintf("%s: %d, limit %d", tt.want, tt.limit+1, tt.limit)
			if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), want) {
				t.Fatalf("over the limit: %v, want ErrTooLarge saying %q", err, want)
			}
			// The raw protobuf gives the same answer as the record.
			if _, err := ParseProfile(over, l); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), want) {
				t.Fatalf("ParseProfile over the limit: %v", err)
			}
		})
	}
}

// TestSmallRecordCannotExpand: 4 MiB of empty samples gzip to a few KB and
// decoded into 2 million *profile.Sample (about 300 MB) before the limits;
// now the decode allocates little more than the decompressed bytes.
func TestSmallRecordCannotExpand(t *testing.T) {
	raw := bytes.Repeat([]byte{fieldProfileSample<<3 | wireBytes, 0}, 2<<20)
	value := gzipLevel(t, raw, gzip.BestCompression)
	var err error
	got := allocated(func() { _, err = DecodeProfile(value) })
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("DecodeProfile(%d-byte record of %d empty samples) = %v, want ErrTooLarge", len(value), 2<<20, err)
	}
	if bound := uint64(len(raw)) + 1<<20; got > bound {
		t.Fatalf("decoding a %d-byte record allocated %d bytes, want at most %d", len(value), got, bound)
	}
	t.Logf("%d-byte record, %d bytes decompressed: %v; allocated %d bytes", len(value), len(raw), err, got)
}

// TestLimitsHeapCost measures the heap ParseProfile allocates for profiles
// made of one kind of element, just past a power of two of them (the worst
// slice growth), and checks that the estimate MaxDecodeHeapBytes is
// compared with is above it.
func TestLimitsHeapCost(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a few hundred MB")
	}
	const k = 1 << 16
	distinctKeys := func() pb {
		b := baseProfile()
		for i := range 128 {
			b = b.str(fmt.Sprintf("key%d", i))
		}
		return b
	}
	tests := []struct {
		name  string
		build func() pb
		count int
	}{
		{"sample", func() pb {
			b := baseProfile()
			for range k {
				b = b.bytes(fieldProfileSample, sample(1, nil, 0))
			}
			return b
		}, k},
		{"value", func() pb {
			b := baseProfile()
			for range 15 {
				b = b.bytes(fieldProfileSampleType, nil)
			}
			for range k {
				b = b.bytes(fieldProfileSample, sample(16, nil, 0))
			}
			return b
		}, 16 * k},
		{"sample location", func() pb {
			b := baseProfile()
			for range k / 64 {
				b = b.bytes(fieldProfileSample, sample(1, repeat(64*16, 1), 0))
			}
			return b
		}, k * 16},
		{"label, one key", func() pb {
			b := baseProfile()
			for range k / 128 {
				b = b.bytes(fieldProfileSample, sample(1, nil, 128))
			}
			return b
		}, k},
		{"label, distinct keys", func() pb {
			b := distinctKeys()
			s := pb{}.packed(fieldSampleValue, 1)
			for i := range 128 {
				s = s.bytes(fieldSampleLabel, pb{}.varint(1, uint64(5+i)).varint(2, strVal))
			}
			for range k / 128 {
				b = b.bytes(fieldProfileSample, s)
			}
			return b
		}, k},
		{"label, one per sample", func() pb {
			b := baseProfile()
			for range k {
				b = b.bytes(fieldProfileSample, sample(1, nil, 1))
			}
			return b
		}, k},
		{"mapping", func() pb {
			b := baseProfile()
			for i := range k {
				b = b.bytes(fieldProfileMapping, pb{}.varint(1, uint64(i+1)<<40))
			}
			return b
		}, k},
		{"location", func() pb {
			b := baseProfile()
			for i := range k {
				b = b.bytes(fieldProfileLocation, pb{}.varint(1, uint64(i+2)<<40))
			}
			return b
		}, k},
		{"line", func() pb {
			b := baseProfile()
			for i := range k / 16 {
				loc := pb{}.varint(1, uint64(i+2))
				for range 16 {
					loc = loc.bytes(fieldLocationLine, pb{}.varint(1, 1))
				}
				b = b.bytes(fieldProfileLocation, loc)
			}
			return b
		}, k},
		{"function", func() pb {
			b := baseProfile()
			for i := range k {
				b = b.bytes(fieldProfileFunction, pb{}.varint(1, uint64(i+2)<<40))
			}
			return b
		}, k},
		{"string", func() pb {
			b := baseProfile()
			for range k {
				b = b.str("")
			}
			return b
		}, k},
		{"comment", func() pb { return baseProfile().packed(fieldProfileComment, repeat(k, 1)...) }, k},
		{"sample type", func() pb {
			b := baseProfile()
			for range k {
				b = b.bytes(fieldProfileSampleType, nil)
			}
			return b
		}, k},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := tt.build()
			c, err := unlimited().count(raw)
			if err != nil {
				t.Fatal(err)
			}
			est := heapEstimate(&c, len(raw))
			got := allocated(func() { _, err = ParseProfile(raw, unlimited()) })
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%-22s %7.1f bytes each (%d of protobuf), %.0f%% of the estimate", tt.name,
				float64(got)/float64(tt.count), len(raw)/tt.count, 100*float64(got)/float64(est))
			if int64(got) > est {
				t.Fatalf("%s: allocated %d bytes, estimated %d", tt.name, got, est)
			}
		})
	}
}

// TestDecodeAtHeapBudget decodes the profile with the most heap per byte
// of protobuf (samples of one label each) as large as DefaultLimits allow:
// what it allocates stays under MaxDecodeHeapBytes plus the decompressed
// buffer.
func TestDecodeAtHeapBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 200 MB")
	}
	l := DefaultLimits()
	build := func(n int) pb {
		b := baseProfile()
		s := sample(1, nil, 1)
		for range n {
			b = b.bytes(fieldProfileSample, s)
		}
		return b
	}
	n := int(l.MaxDecodeHeapBytes / 835)
	raw := build(n)
	for {
		c, err := l.count(raw)
		if err == nil {
			t.Logf("%d samples, %d bytes of protobuf, estimate %d", c.samples, len(raw), heapEstimate(&c, len(raw)))
			break
		}
		if !errors.Is(err, ErrTooLarge) {
			t.Fatal(err)
		}
		n -= n / 100
		raw = build(n)
	}
	value := gzipLevel(t, raw, gzip.BestSpeed)
	var err error
	got := allocated(func() { _, err = DecodeProfile(value) })
	if err != nil {
		t.Fatal(err)
	}
	bound := uint64(l.MaxDecodeHeapBytes) + 2*uint64(len(raw)) + 1<<20
	t.Logf("%d-byte record: allocated %d bytes (%.0f MiB), bound %d", len(value), got, float64(got)/(1<<20), bound)
	if got > bound {
		t.Fatalf("allocated %d bytes, bound %d", got, bound)
	}
	if _, err := DecodeProfile(gzipLevel(t, build(n+n/50), gzip.BestSpeed)); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "estimated decode heap") {
		t.Fatalf("2%% more samples: %v, want ErrTooLarge for the estimated heap", err)
	}
}

package aggregate

import (
	"bytes"
	"compress/gzip"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/pproftest/symcorpus"
	"github.com/stackstream/stackstream/schemas/record"
)

// testRecord is a record value with what Add takes from its headers.
type testRecord struct {
	value []byte
	typ   record.ProfileType
	host  string
	ts    time.Time
}

func corpusRecords(tb testing.TB) []testRecord {
	var out []testRecord
	for _, r := range symcorpus.Read(tb) {
		meta := r.Meta(tb)
		out = append(out, testRecord{value: r.Value, typ: meta.Type, host: record.Host(meta, nil), ts: r.Timestamp})
	}
	return out
}

// encodeStored encodes profiles as the symbolizer writes them.
func encodeStored(tb testing.TB, profs []*profile.Profile, typ record.ProfileType, hostOf []string) []testRecord {
	var out []testRecord
	for i, p := range profs {
		v, err := record.EncodeProfileStored(p)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, testRecord{value: v, typ: typ, host: hostOf[i]})
	}
	return out
}

// TestWireSameDocuments: folding records through Decoder's wire tables
// gives exactly the documents (their JSON) that folding the profiles
// google/pprof's parser builds gives, flush after flush, for the loadgen
// corpus (CPU and memory) and for loadgen-shaped fleets, with and without
// the host header.
func TestWireSameDocuments(t *testing.T) {
	fleet, hostOf := fleetProfiles(20, 8)
	for i := range fleet {
		fleet[i].TimeNanos = t0.Add(time.Duration(i/20) * 10 * time.Second).UnixNano()
	}
	noHost := make([]string, len(hostOf))
	for _, p := range fleet {
		for _, s := range p.Sample {
			s.Label[record.LabelHost] = []string{"label-host"}
		}
	}
	for _, tc := range []struct {
		name string
		recs []testRecord
		now  time.Time
	}{
		{"loadgen corpus", corpusRecords(t), time.Now()},
		{"fleet", encodeStored(t, fleet, record.ProfileCPU, hostOf), t0.Add(time.Hour)},
		{"fleet host label", encodeStored(t, fleet, record.ProfileCPU, noHost), t0.Add(time.Hour)},
		{"fleet memory", encodeStored(t, fleet, record.ProfileMemory, hostOf), t0.Add(time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Now = func() time.Time { return tc.now }
			cfg.MaxClockSkew = 24 * time.Hour
			cfg.Budget = &Budget{MaxBytes: math.MaxInt64}
			general := NewPartition(cfg, Checkpoint{})
			cfg.Budget = &Budget{MaxBytes: math.MaxInt64}
			wire := NewPartition(cfg, Checkpoint{})
			dec := NewDecoder(record.Limits{})
			docs := 0
			for i, r := range tc.recs {
				p, err := record.DecodeProfile(r.value)
				if err != nil {
					t.Fatal(err)
				}
				in := Input{Profile: p, Type: r.typ, Host: r.host, Offset: int64(i), Fallback: r.ts}
				outG, errG := general.Add(in)
				if in, err = dec.Decode(r.value); err != nil {
					t.Fatal(err)
				}
				if in.Wire == nil {
					t.Fatalf("record %d was left to the general path", i)
				}
				in.Type, in.Host, in.Offset, in.Fallback = r.typ, r.host, int64(i), r.ts
				outW, errW := wire.Add(in)
				if outG != outW || (errG == nil) != (errW == nil) {
					t.Fatalf("record %d: general %v %v, wire %v %v", i, outG, errG, outW, errW)
				}
				if i%7 == 6 || i == len(tc.recs)-1 {
					docs += sameDocuments(t, general, wire, i == len(tc.recs)-1)
				}
			}
			if docs == 0 {
				t.Fatal("no documents")
			}
		})
	}
}

// sameDocuments compares the pending documents of a and b, marks them
// stored and evicts, and returns how many there were.
func sameDocuments(t *testing.T, a, b *Partition, all bool) int {
	t.Helper()
	ja, jb := pendingJSON(t, a.Pending(all)), pendingJSON(t, b.Pending(all))
	if !slices.Equal(ja, jb) {
		for i := range min(len(ja), len(jb)) {
			if ja[i] != jb[i] {
				t.Fatalf("document %d differs:\ngeneral %s\nwire    %s", i, ja[i], jb[i])
			}
		}
		t.Fatalf("general %d documents, wire %d", len(ja), len(jb))
	}
	for _, p := range []*Partition{a, b} {
		MarkStored(p.Pending(all))
		p.Evict()
	}
	return len(ja)
}

func pendingJSON(t *testing.T, pending []Pending) []string {
	var out []string
	for i := range pending {
		doc, err := pending[i].AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pending[i].Index+"/"+pending[i].ID+" "+string(doc))
	}
	slices.Sort(out)
	return out
}

// TestDecoderLeavesToGeneral: what the wire reader does not read as
// google/pprof does goes through record.DecodeProfileLimits, with its
// errors (the DLQ reasons) for what it refuses.
func TestDecoderLeavesToGeneral(t *testing.T) {
	good := pproftest.NewCPU(t0, 10*time.Second).Sample(svc("api"), []int64{1, 10}, "work", "main").Profile()
	numLabel := good.Copy()
	numLabel.Sample[0].NumLabel = map[string][]int64{"bytes": {4}}
	sparse := good.Copy()
	sparse.Location[0].ID = 1 << 40
	missing := good.Copy()
	missing.Sample[0].Location = append(missing.Sample[0].Location, &profile.Location{ID: 99})
	limit := func(set func(*record.Limits)) record.Limits {
		l := record.DefaultLimits()
		set(&l)
		return l
	}
	mapped := good.Copy()
	mapped.Mapping = []*profile.Mapping{{ID: 1, File: "/usr/bin/api"}}
	mapped.Location[0].Mapping = mapped.Mapping[0]
	commented := good.Copy()
	commented.Comments = []string{"a comment"}
	for _, tc := range []struct {
		name    string
		value   []byte
		limits  record.Limits
		general bool  // decoded by record.DecodeProfileLimits
		err     error // its error
	}{
		{"usual", stored(t, good), record.Limits{}, false, nil},
		{"compressed", compressed(t, good), record.Limits{}, false, nil},
		{"numeric label", stored(t, numLabel), record.Limits{}, true, nil},
		{"sparse IDs", stored(t, sparse), record.Limits{}, true, nil},
		{"missing location", stored(t, missing), record.Limits{}, true, record.ErrInvalidProfile},
		// A limit on the whole profile (Check, as the profile is shorter
		// than pprofwire.CheckAbove) and on one element (the wire reader).
		{"too many samples", stored(t, good), limit(func(l *record.Limits) { l.MaxSamples = 0 }), true, record.ErrTooLarge},
		{"too many sample types", stored(t, good), limit(func(l *record.Limits) { l.MaxSampleTypes = 1 }), true, record.ErrTooLarge},
		{"long string", stored(t, good), limit(func(l *record.Limits) { l.MaxStringBytes = 3 }), true, record.ErrTooLarge},
		{"deep stack", stored(t, good), limit(func(l *record.Limits) { l.MaxLocationsPerSample = 1 }), true, record.ErrTooLarge},
		{"many labels", stored(t, good), limit(func(l *record.Limits) { l.MaxLabelsPerSample = 1 }), true, record.ErrTooLarge},
		{"mapping", stored(t, mapped), record.Limits{}, false, nil},
		{"many mappings", stored(t, mapped), limit(func(l *record.Limits) { l.MaxMappings = 0 }), true, record.ErrTooLarge},
		{"comments", stored(t, commented), limit(func(l *record.Limits) { l.MaxComments = 0 }), true, record.ErrTooLarge},
		{"not gzip", []byte("pprof"), record.Limits{}, true, record.ErrNotGzip},
		{"not pprof", gzipped(t, []byte{0xff, 0xff}), record.Limits{}, true, record.ErrNotPprof},
		{"too large", compressed(t, good), record.Limits{MaxDecompressedBytes: 10}, true, record.ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(tc.limits)
			general := false
			d.general = func(v []byte, l record.Limits) (*profile.Profile, error) {
				general = true
				return record.DecodeProfileLimits(v, l)
			}
			in, err := d.Decode(tc.value)
			if general != tc.general || !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
				t.Fatalf("general %v, error %v; want %v, %v", general, err, tc.general, tc.err)
			}
			if err == nil && (in.Wire == nil) != tc.general {
				t.Fatalf("wire %v, profile %v", in.Wire != nil, in.Profile != nil)
			}
		})
	}
}

func stored(t testing.TB, p *profile.Profile) []byte {
	v, err := record.EncodeProfileStored(p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func compressed(t testing.TB, p *profile.Profile) []byte {
	v, err := record.EncodeProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func gzipped(t testing.TB, raw []byte) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// fuzzLimits keep what one fuzz input can make the decoders allocate small.
func fuzzLimits() record.Limits {
	l := record.DefaultLimits()
	l.MaxDecompressedBytes = 1 << 20
	l.MaxDecodeHeapBytes = 16 << 20
	return l
}

// FuzzDecode: for any protobuf, the wire tables fold into the same
// documents as google/pprof's profile, and what record.DecodeProfileLimits
// refuses Decode refuses with the same error; nothing panics. Inputs are
// the uncompressed protobuf, stored-gzipped here.
func FuzzDecode(f *testing.F) {
	seed := pproftest.NewCPU(t0, 10*time.Second).
		Sample(map[string]string{record.LabelService: "api", record.LabelHost: "h"}, []int64{2, 20}, "work", "main").
		Sample(svc("db"), []int64{1, 10}, "query", "main").Profile()
	var raw bytes.Buffer
	if err := seed.WriteUncompressed(&raw); err != nil {
		f.Fatal(err)
	}
	f.Add(raw.Bytes())
	fleet, _ := fleetProfiles(1, 1)
	raw.Reset()
	if err := fleet[0].WriteUncompressed(&raw); err != nil {
		f.Fatal(err)
	}
	f.Add(raw.Bytes())
	f.Fuzz(func(t *testing.T, raw []byte) {
		l := fuzzLimits()
		var v bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&v, gzip.NoCompression)
		if _, err := zw.Write(raw); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		want, errG := record.DecodeProfileLimits(v.Bytes(), l)
		d := NewDecoder(l)
		in, errW := d.Decode(v.Bytes())
		if (errG == nil) != (errW == nil) || errG != nil && errG.Error() != errW.Error() {
			t.Fatalf("general error %v, wire error %v", errG, errW)
		}
		if errG != nil || in.Wire == nil {
			return
		}
		cfg := testConfig()
		cfg.Now = func() time.Time { return time.Unix(0, math.MaxInt64) }
		cfg.MaxClockSkew = time.Duration(math.MaxInt64)
		for _, typ := range []record.ProfileType{record.ProfileCPU, record.ProfileMemory} {
			a, b := NewPartition(cfg, Checkpoint{}), NewPartition(cfg, Checkpoint{})
			outA, errA := a.Add(Input{Profile: want, Type: typ, Host: "", Fallback: t0})
			in.Type, in.Host, in.Offset, in.Fallback = typ, "", 0, t0
			outB, errB := b.Add(in)
			if outA != outB || (errA == nil) != (errB == nil) || errA != nil && errA.Error() != errB.Error() {
				t.Fatalf("%s: general %v %v, wire %v %v", typ, outA, errA, outB, errB)
			}
			ja, jb := pendingJSON(t, a.Pending(true)), pendingJSON(t, b.Pending(true))
			if !slices.Equal(ja, jb) {
				t.Fatalf("%s: general documents\n%s\nwire documents\n%s", typ, strings.Join(ja, "\n"), strings.Join(jb, "\n"))
			}
		}
	})
}

// TestNamedLocationsShareCachedStacks: the same named frames of a library
// mapped at another address (another process, another host) find the
// stacks cached from the first profile, while a location named by its
// address (a line without a function name) stays apart per address; and
// both read as the general path reads them.
func TestNamedLocationsShareCachedStacks(t *testing.T) {
	profileAt := func(base uint64) *profile.Profile {
		b := pproftest.NewCPU(t0, 10*time.Second)
		lib := b.Mapping(base, base+0x100000, 0, "/usr/lib/libssl.so.3", "ssl1")
		named := b.NamedLocation(lib, base+0x1234, "SSL_read", "ssl/ssl_lib.c", 42)
		caller := b.NamedLocation(lib, base+0x2345, "ssl3_read_bytes", "ssl/record/rec_layer_s3.c", 7)
		unnamed := b.NamedLocation(lib, base+0x3456, "", "", 0)
		b.LocationSample(svc("api"), []int64{3, 300}, named, caller)
		b.LocationSample(svc("api"), []int64{1, 100}, unnamed, caller)
		return b.Profile()
	}
	cfg := testConfig()
	cfg.Budget = &Budget{MaxBytes: math.MaxInt64}
	wire := NewPartition(cfg, Checkpoint{})
	cfg.Budget = &Budget{MaxBytes: math.MaxInt64}
	general := NewPartition(cfg, Checkpoint{})
	dec := NewDecoder(record.Limits{})
	for i, base := range []uint64{0x7f0000000000, 0x7f1234500000} {
		prof := profileAt(base)
		in, err := dec.Decode(stored(t, prof))
		if err != nil || in.Wire == nil {
			t.Fatalf("profile %d: %v, wire %v", i, err, in.Wire != nil)
		}
		in.Type, in.Host, in.Offset = record.ProfileCPU, "web-1", int64(i)
		if _, err := wire.Add(in); err != nil {
			t.Fatal(err)
		}
		if _, err := general.Add(Input{Profile: prof, Type: record.ProfileCPU, Host: "web-1", Offset: int64(i)}); err != nil {
			t.Fatal(err)
		}
		// The named stack is cached once; the unnamed one once per address.
		if got, want := wire.stacks.n, 2+i; got != want {
			t.Fatalf("after profile %d: %d stacks cached, want %d", i, got, want)
		}
	}
	if n := sameDocuments(t, general, wire, true); n == 0 {
		t.Fatal("no documents")
	}
}

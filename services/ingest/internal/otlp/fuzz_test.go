package otlp_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/convert"
	"github.com/stackstream/stackstream/services/ingest/internal/ingesttest"
	"github.com/stackstream/stackstream/services/ingest/internal/otlp"
)

// FuzzConvert runs what the server runs on a body: Check, pdata's decode,
// Convert and convert.Records. Whatever passes must give records the
// consumers decode within the record limits; nothing may panic.
func FuzzConvert(f *testing.F) {
	now := time.Now()
	f.Add(marshal(f, ingesttest.EBPFProfilerRequest(now)))
	b := ingesttest.NewOTLPBuilder()
	p := b.Profile(map[string]string{"service.name": "s"}, "cpu", "nanoseconds", now)
	b.Sample(p, b.Stack(b.Frame("go", "main.main", "main.go", 3, b.Mapping("/bin/app", "ab", 0x400000, 0x500000, 0), 0x401000)), nil, []int64{10}, 0, now)
	f.Add(marshal(f, b.PD))
	limits := otlp.DefaultLimits()
	limits.MaxDecodeHeapBytes = 16 << 20
	opts := convert.Options{Limits: record.DefaultLimits(), MaxClockSkew: 1 << 62, MaxRecordBytes: 983040, Now: func() time.Time { return now }}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if otlp.Check(raw, limits) != nil {
			return
		}
		req := pprofileotlp.NewExportRequest()
		if req.UnmarshalProto(raw) != nil {
			return
		}
		profs, _, err := otlp.Convert(req.Profiles())
		if err != nil {
			if !errors.Is(err, otlp.ErrInvalid) && !errors.Is(err, convert.ErrInvalidTag) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		for _, p := range profs {
			parsed, err := profile.ParseUncompressed(p.Pprof)
			if err != nil {
				t.Fatalf("converted profile does not parse: %v", err)
			}
			if err := parsed.CheckValid(); err != nil {
				t.Fatalf("converted profile invalid: %v", err)
			}
			recs, err := convert.Pprof(p.Pprof, convert.Push{Host: "h"}, opts)
			if err != nil {
				continue
			}
			for _, r := range recs {
				if _, err := record.DecodeProfile(r.Value); err != nil {
					t.Fatalf("record does not decode: %v", err)
				}
			}
		}
	})
}

// FuzzConvertJSON: OTLP JSON as pdata decodes it (the HTTP endpoint bounds
// its size instead of counting it) through Convert: no panic, valid
// profiles.
func FuzzConvertJSON(f *testing.F) {
	b, err := pprofileotlp.NewExportRequestFromProfiles(ingesttest.EBPFProfilerRequest(time.Now())).MarshalJSON()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, raw []byte) {
		req := pprofileotlp.NewExportRequest()
		if req.UnmarshalJSON(raw) != nil {
			return
		}
		profs, _, err := otlp.Convert(req.Profiles())
		if err != nil {
			return
		}
		for _, p := range profs {
			parsed, err := profile.ParseUncompressed(p.Pprof)
			if err != nil {
				t.Fatalf("converted profile does not parse: %v", err)
			}
			if err := parsed.CheckValid(); err != nil {
				t.Fatalf("converted profile invalid: %v", err)
			}
		}
	})
}

package server

import (
	"net/http"

	"github.com/stackstream/stackstream/services/ingest/internal/convert"
	"github.com/stackstream/stackstream/services/ingest/internal/jfr"
)

// ingestJFR serves /ingest?format=jfr: the Pyroscope Java agent's JFR
// recording, as the body or as the "jfr" field of a multipart form,
// gzipped or not. Its CPU samples become a cpu record, its allocation
// samples an alloc record, each stored as the other formats are.
func (s *Server) ingestJFR(push convert.Push, body []byte, mediaType, boundary string, r *http.Request, spy string) *failure {
	data := body
	if mediaType == "multipart/form-data" {
		f, err := readForm(body, boundary, "jfr")
		if err != nil {
			return fail(http.StatusBadRequest, "bad_form", "%v", err)
		}
		// The "labels" field (the agent's per-context labels, protobuf,
		// referred to by the recording's context ids) is not read: every
		// sample carries the name's tags only.
		data = f.jfr
	}
	limits := s.opts.Convert.Limits
	if len(data) > 1 && data[0] == 0x1f && data[1] == 0x8b {
		var err error
		if data, err = convert.Gunzip(data, limits.MaxDecompressedBytes); err != nil {
			return s.decodeFailure("jfr", err)
		}
	}
	jl := jfr.DefaultLimits
	jl.MaxChunkBytes, jl.MaxFrames = limits.MaxDecompressedBytes, limits.MaxLocationsPerSample
	rec, err := jfr.Parse(data, jl)
	if err != nil {
		return s.decodeFailure("jfr", err)
	}
	s.m.profiles.WithLabelValues("jfr").Inc()
	ps := jfr.ToPprof(rec)
	if ps.CPU == nil && ps.Alloc == nil {
		s.m.empty.Inc()
		return nil
	}
	if ps.CPU != nil {
		p := push
		p.Profile, p.Hint = ps.CPU, "cpu" // samples/count: cpu/nanoseconds from sampleRate
		if f := s.store(p, nil, r, spy); f != nil {
			return f
		}
	}
	if ps.Alloc != nil {
		p := push
		p.Profile, p.Hint = ps.Alloc, ""
		return s.store(p, nil, r, spy)
	}
	return nil
}

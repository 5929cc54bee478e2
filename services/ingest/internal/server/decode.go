package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"

	"github.com/google/pprof/profile"
)

// sampleType is one entry of the Go SDK's sample_type_config.
type sampleType struct {
	Units       string `json:"units"`
	Aggregation string `json:"aggregation"`
	DisplayName string `json:"display-name"`
	Sampled     bool   `json:"sampled"`
	Cumulative  bool   `json:"cumulative"`
}

// form is the multipart body of the Go SDK: "profile" (pprof), the
// deprecated "prev_profile" (the previous cumulative profile, to subtract)
// and "sample_type_config" (JSON: per sample type, units, aggregation,
// cumulative).
type form struct {
	profile, prevProfile []byte
	jfr                  []byte // the Java agent's form: "jfr" (and "labels", not read)
	sampleTypes          map[string]sampleType
}

const maxSampleTypeConfigBytes = 64 << 10

// readForm reads the parts of a multipart body; want names the field that
// must be there ("profile", or "jfr" for the Java agent).
func readForm(body []byte, boundary, want string) (form, error) {
	var f form
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return f, fmt.Errorf("%w: multipart body: %v", errBadRequest, err)
		}
		// The whole body is in memory already, bounded by the body limit.
		var buf bytes.Buffer
		buf.Grow(min(len(body), 1<<20) + bytes.MinRead)
		_, err = buf.ReadFrom(part)
		data := buf.Bytes()
		if err != nil {
			return f, fmt.Errorf("%w: multipart field %q: %v", errBadRequest, part.FormName(), err)
		}
		switch part.FormName() {
		case "profile":
			f.profile = data
		case "prev_profile":
			f.prevProfile = data
		case "jfr":
			f.jfr = data
		case "sample_type_config":
			if len(data) > maxSampleTypeConfigBytes {
				return f, fmt.Errorf("%w: sample_type_config is %d bytes, limit %d", errBadRequest, len(data), maxSampleTypeConfigBytes)
			}
			if err := json.Unmarshal(data, &f.sampleTypes); err != nil {
				return f, fmt.Errorf("%w: sample_type_config is not a JSON object of sample types: %v", errBadRequest, err)
			}
		}
	}
	if (want == "profile" && len(f.profile) == 0) || (want == "jfr" && len(f.jfr) == 0) {
		return f, fmt.Errorf("%w: multipart body has no %q field", errBadRequest, want)
	}
	return f, nil
}

// defaultCumulative are the sample types Pyroscope treats as cumulative
// when a client sends a previous profile without a sample_type_config.
var defaultCumulative = map[string]bool{"alloc_objects": true, "alloc_space": true, "contentions": true, "delay": true}

// subtractPrev turns a cumulative profile into the delta since prev: the
// values of cumulative sample types are current minus previous (never
// below 0), the others stay as they are.
func subtractPrev(cur, prev *profile.Profile, types map[string]sampleType) (*profile.Profile, error) {
	ratios := make([]float64, len(prev.SampleType))
	any := false
	for i, st := range prev.SampleType {
		cumulative := defaultCumulative[st.Type]
		if c, ok := types[st.Type]; ok {
			cumulative = c.Cumulative
		}
		if cumulative {
			ratios[i] = -1
			any = true
		}
	}
	if !any {
		return cur, nil
	}
	if err := prev.ScaleN(ratios); err != nil {
		return nil, fmt.Errorf("%w: prev_profile: %v", errBadRequest, err)
	}
	time, dur := cur.TimeNanos, cur.DurationNanos
	merged, err := profile.Merge([]*profile.Profile{cur, prev})
	if err != nil {
		return nil, fmt.Errorf("%w: prev_profile does not match profile: %v", errBadRequest, err)
	}
	merged.TimeNanos, merged.DurationNanos = time, dur
	kept := merged.Sample[:0]
	for _, s := range merged.Sample {
		nonzero := false
		for i, v := range s.Value {
			if v < 0 {
				s.Value[i] = 0
			} else if v > 0 {
				nonzero = true
			}
		}
		if nonzero {
			kept = append(kept, s)
		}
	}
	merged.Sample = kept
	return merged, nil
}

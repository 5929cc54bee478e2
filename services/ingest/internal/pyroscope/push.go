package pyroscope

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// PushPath is the path of the push API (Connect, unary, protobuf) that
// current Pyroscope SDKs (pyroscope-rs and the Python and Ruby packages
// built on it) send to.
const PushPath = "/push.v1.PusherService/Push"

// Series is one RawProfileSeries of a push request: labels (service_name,
// __name__, tags) and the raw profiles (pprof) that carry them.
type Series struct {
	Labels   []Tag
	Profiles [][]byte
}

// PushLimits bounds a decoded push request.
type PushLimits struct {
	MaxSeries   int // series of one request
	MaxProfiles int // raw profiles of all series
	MaxLabels   int // labels of one series
}

// DefaultPushLimits: an SDK sends one series with one profile per push.
var DefaultPushLimits = PushLimits{MaxSeries: 64, MaxProfiles: 64, MaxLabels: MaxTags + 16}

// Field numbers of push/v1/push.proto and types/v1/types.proto.
const (
	fieldPushSeries    = 1 // PushRequest.series
	fieldSeriesLabels  = 1 // RawProfileSeries.labels
	fieldSeriesSamples = 2 // RawProfileSeries.samples
	fieldLabelName     = 1 // LabelPair.name
	fieldLabelValue    = 2 // LabelPair.value
	fieldSampleProfile = 1 // RawSample.raw_profile
)

// DecodePush reads a PushRequest protobuf. The profiles alias data.
func DecodePush(data []byte, l PushLimits) ([]Series, error) {
	var out []Series
	profiles := 0
	err := fields(data, func(num protowire.Number, msg []byte) error {
		if num != fieldPushSeries {
			return nil
		}
		if len(out) == l.MaxSeries {
			return fmt.Errorf("%w: push request has more than %d series", ErrInvalid, l.MaxSeries)
		}
		var s Series
		err := fields(msg, func(num protowire.Number, msg []byte) error {
			switch num {
			case fieldSeriesLabels:
				if len(s.Labels) == l.MaxLabels {
					return fmt.Errorf("%w: push series has more than %d labels", ErrInvalid, l.MaxLabels)
				}
				var t Tag
				err := fields(msg, func(num protowire.Number, b []byte) error {
					switch num {
					case fieldLabelName:
						t.Key = string(b)
					case fieldLabelValue:
						t.Value = string(b)
					}
					return nil
				})
				s.Labels = append(s.Labels, t)
				return err
			case fieldSeriesSamples:
				if profiles == l.MaxProfiles {
					return fmt.Errorf("%w: push request has more than %d profiles", ErrInvalid, l.MaxProfiles)
				}
				profiles++
				return fields(msg, func(num protowire.Number, b []byte) error {
					if num == fieldSampleProfile {
						s.Profiles = append(s.Profiles, b)
					}
					return nil
				})
			}
			return nil
		})
		out = append(out, s)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// fields calls fn with every length-delimited field of msg and skips the
// others.
func fields(msg []byte, fn func(protowire.Number, []byte) error) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return fmt.Errorf("%w: push request is not protobuf: %v", ErrInvalid, protowire.ParseError(n))
		}
		msg = msg[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, msg)
			if n < 0 {
				return fmt.Errorf("%w: push request is not protobuf: %v", ErrInvalid, protowire.ParseError(n))
			}
			msg = msg[n:]
			continue
		}
		b, n := protowire.ConsumeBytes(msg)
		if n < 0 {
			return fmt.Errorf("%w: push request is not protobuf: %v", ErrInvalid, protowire.ParseError(n))
		}
		msg = msg[n:]
		if err := fn(num, b); err != nil {
			return err
		}
	}
	return nil
}

// Package convert turns a pushed profile into profile records of the Kafka
// contract (schemas/kafka.md): it decides the record profile type from the
// sample types, sets the service, tag and tenant labels on every sample,
// marks named frames so the symbolizer passes them through, stamps the
// time, and encodes gzip pprof within record.Limits, split into parts when
// one record would be larger than a Kafka message may be.
package convert

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"
	"github.com/klauspost/compress/gzip"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/pyroscope"
)

// Errors a caller maps to an HTTP status and a rejects reason.
var (
	// ErrUnsupported: the profile measures something the pipeline does not
	// store (wall time, mutex or block contention, goroutines, ...).
	ErrUnsupported = errors.New("unsupported profile type")
	// ErrInvalidTag: a tag key that is not a label key after normalizing.
	ErrInvalidTag = errors.New("invalid tag")
)

// LabelTenant is the label naming the tenant whose token authenticated the push.
const LabelTenant = "tenant"

// LabelSessionID carries Pyroscope's __session_id__: it tells apart two
// processes of one application on one host (each SDK instance has its
// own), as pid does for the agent, so their profiles of the same second get
// different document IDs downstream.
const LabelSessionID = "session_id"

// Push is one profile as a client sent it, with what the request said about it.
type Push struct {
	Profile *profile.Profile
	// Service is the service label of every sample; "" keeps the
	// samples' own (an OTLP profile's are per sample).
	Service string
	Tags    []pyroscope.Tag
	// Tenant is the tenant of the token that authenticated the request, or "".
	Tenant string
	// Host is the record key: the hostname tag, else the client's address.
	Host string
	// Hint names the type the client meant: the name's suffix (cpu,
	// inuse_space, ...) or the push API's __name__ (process_cpu, memory).
	Hint string
	// SpyName is the client's profiler (gospy, pyspy, ...).
	SpyName string
	// SampleRate is samples per second of a CPU profile, used when the
	// profile states no period; 0 means 100.
	SampleRate  int64
	From, Until time.Time
}

// Options bound and stamp the records.
type Options struct {
	Limits       record.Limits
	MaxAge       time.Duration // older profiles are refused; 0 accepts any past time
	MaxClockSkew time.Duration
	// MaxRecordBytes bounds one record's value; a larger profile is split
	// into parts by samples.
	MaxRecordBytes int
	Now            func() time.Time
}

// Record is one record value of a profile type.
type Record struct {
	Type  record.ProfileType
	Value []byte
	// Part is the record.HeaderPart value, "" when the profile fits one record.
	Part string
}

// Tags normalizes a request's tags into labels: Pyroscope's __session_id__
// becomes session_id, other keys starting with __ (reserved by Pyroscope)
// are dropped, dots and dashes become underscores (otel.scope.name ->
// otel_scope_name), and "hostname" is returned as the host instead of a
// label. service and tenant are set by the service, never by a client, so
// tags of those names are dropped. Values are cut to
// record.MaxLabelValueBytes. A key that is still not a valid label key is
// an ErrInvalidTag naming it.
func Tags(tags []pyroscope.Tag) (labels map[string]string, host string, err error) {
	labels = make(map[string]string, len(tags))
	for _, t := range tags {
		k := t.Key
		switch {
		case k == "__session_id__":
			k = LabelSessionID
		case strings.HasPrefix(k, "__"):
			continue
		case k == "hostname":
			host = t.Value
			continue
		}
		k = strings.NewReplacer(".", "_", "-", "_").Replace(k)
		if k == record.LabelService || k == LabelTenant || k == record.LabelHost {
			continue
		}
		if !record.ValidLabelKey(k) {
			return nil, "", fmt.Errorf("%w: key %q: use letters, digits and _ (not first), at most %d bytes", ErrInvalidTag, short(t.Key), record.MaxLabelKeyBytes)
		}
		labels[k] = record.TruncateUTF8(t.Value, record.MaxLabelValueBytes)
	}
	return labels, host, nil
}

// Records converts push into records, one per profile type it holds (a Go
// heap profile is both heap and alloc). It changes push.Profile.
func Records(push Push, opts Options) ([]Record, error) {
	p := push.Profile
	types, err := Classify(p, push.Hint, push.SampleRate)
	if err != nil {
		return nil, err
	}
	if err := stamp(p, push, opts); err != nil {
		return nil, err
	}
	labels, err := sampleLabels(push)
	if err != nil {
		return nil, err
	}
	for _, s := range p.Sample {
		if s.Label == nil {
			s.Label = make(map[string][]string, len(labels))
		}
		delete(s.Label, LabelTenant) // only a token names the tenant
		for k, v := range labels {
			s.Label[k] = []string{v}
		}
	}
	markNamed(p, push.SpyName)

	values, err := encode(p, "", opts)
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(types)*len(values))
	for _, t := range types {
		for _, v := range values {
			out = append(out, Record{Type: t, Value: v.value, Part: v.part})
		}
	}
	return out, nil
}

// stamp sets the profile's time from from/until when it states none, and
// refuses times the consumers would send to the DLQ.
func stamp(p *profile.Profile, push Push, opts Options) error {
	var err error
	p.TimeNanos, p.DurationNanos, err = stampTimes(p.TimeNanos, p.DurationNanos, push, opts)
	return err
}

func stampTimes(timeNanos, durationNanos int64, push Push, opts Options) (int64, int64, error) {
	now := opts.Now()
	if timeNanos <= 0 {
		from := push.From
		if from.IsZero() {
			from = now
		}
		timeNanos = from.UnixNano()
	}
	if durationNanos <= 0 && !push.From.IsZero() && push.Until.After(push.From) {
		durationNanos = int64(push.Until.Sub(push.From))
	}
	return timeNanos, durationNanos, record.CheckTime(time.Unix(0, timeNanos), now, opts.MaxAge, opts.MaxClockSkew)
}

// sampleLabels are the labels every sample gets: the tags, service and tenant.
func sampleLabels(push Push) (map[string]string, error) {
	labels, _, err := Tags(push.Tags)
	if err != nil {
		return nil, err
	}
	if push.Service != "" {
		// Else the samples carry their own (OTLP: per sample).
		labels[record.LabelService] = record.TruncateUTF8(push.Service, record.MaxServiceBytes)
	}
	if push.Tenant != "" {
		labels[LabelTenant] = push.Tenant
	}
	return labels, nil
}

// Pprof converts a pushed pprof body, in any form DecodePprof reads, into
// records; push.Profile is not used. A protobuf profile within the limits
// is rewritten as it is encoded (rewriteWire), which costs a fraction of
// parsing and encoding it again; legacy formats, profiles to complete or
// to split take the parsed path (Records). No records and no error: the
// profile has no samples.
func Pprof(data []byte, push Push, opts Options) ([]Record, error) {
	l := opts.Limits
	raw := data
	if isGzip(data) {
		buf := bufPool.Get().(*bytes.Buffer)
		defer bufPool.Put(buf)
		var err error
		if raw, err = gunzipInto(buf, data, l.MaxDecompressedBytes); err != nil {
			return nil, err
		}
	}
	if err := l.Check(raw); err == nil {
		recs, err := wireRecords(raw, push, opts)
		// Not protobuf after all: the parsed path tries the legacy formats
		// and names what is wrong.
		if !errors.Is(err, errSlowPath) && !errors.Is(err, record.ErrNotPprof) {
			return recs, err
		}
	} else if errors.Is(err, record.ErrTooLarge) {
		return nil, err
	}
	p, err := DecodePprof(raw, l)
	if err != nil {
		return nil, err
	}
	if len(p.Sample) == 0 {
		return nil, nil
	}
	push.Profile = p
	return Records(push, opts)
}

func wireRecords(raw []byte, push Push, opts Options) ([]Record, error) {
	labels, err := sampleLabels(push)
	if err != nil {
		return nil, err
	}
	out, types, err := rewriteWire(raw, labels, func(t, d int64) (int64, int64, error) { return stampTimes(t, d, push, opts) })
	if err != nil || len(types) == 0 {
		return nil, err
	}
	if err := opts.Limits.Check(out); err != nil {
		return nil, err
	}
	if len(out)+len(out)/16000*5+64 > opts.MaxRecordBytes {
		return nil, errSlowPath
	}
	value, err := gzipBytes(out)
	if err != nil {
		return nil, err
	}
	recs := make([]Record, len(types))
	for i, t := range types {
		recs[i] = Record{Type: t, Value: value}
	}
	return recs, nil
}

func isGzip(b []byte) bool { return len(b) > 1 && b[0] == 0x1f && b[1] == 0x8b }

// spyMappings names the pseudo-file of frames of profilers of interpreted
// runtimes: their frames then show their kind (python, java, js) downstream.
var spyMappings = map[string]string{
	"pyspy":   record.MappingPython,
	"javaspy": record.MappingJava, "jfr": record.MappingJava,
	"nodespy": record.MappingJS,
}

// markNamed marks the frames that arrive named: a mapping whose every
// location has lines gets HasFunctions (and HasFilenames/HasLineNumbers
// where they are given), so the symbolizer passes it through; locations
// with lines but without a mapping get the pseudo-file of an interpreted
// runtime's profiler, when the spy is one.
func markNamed(p *profile.Profile, spy string) {
	unnamed := make(map[*profile.Mapping]bool, len(p.Mapping))
	var pseudo *profile.Mapping
	for _, loc := range p.Location {
		if loc.Mapping == nil {
			file, ok := spyMappings[spy]
			if !ok || len(loc.Line) == 0 {
				continue
			}
			if pseudo == nil {
				var id uint64
				for _, m := range p.Mapping {
					id = max(id, m.ID)
				}
				pseudo = &profile.Mapping{ID: id + 1, File: file, HasFunctions: true, HasFilenames: true, HasLineNumbers: true}
				p.Mapping = append(p.Mapping, pseudo)
			}
			loc.Mapping = pseudo
			continue
		}
		if len(loc.Line) == 0 {
			unnamed[loc.Mapping] = true
		}
	}
	for _, loc := range p.Location {
		m := loc.Mapping
		if m == nil || unnamed[m] || m == pseudo {
			continue
		}
		m.HasFunctions = true
		if ln := loc.Line[0]; ln.Line != 0 {
			m.HasLineNumbers = true
		}
		if fn := loc.Line[0].Function; fn != nil && fn.Filename != "" {
			m.HasFilenames = true
		}
	}
}

type part struct {
	value []byte
	part  string
}

// encode writes p as gzip pprof, checks it against opts.Limits (the check
// every consumer runs on decode), and splits it by samples while a record
// would exceed opts.MaxRecordBytes.
func encode(p *profile.Profile, partName string, opts Options) ([]part, error) {
	raw := bufPool.Get().(*bytes.Buffer)
	defer bufPool.Put(raw)
	raw.Reset()
	if err := p.WriteUncompressed(raw); err != nil {
		return nil, fmt.Errorf("encode profile: %w", err)
	}
	if err := opts.Limits.Check(raw.Bytes()); err != nil {
		return nil, err
	}
	value, err := gzipBytes(raw.Bytes())
	if err != nil {
		return nil, err
	}
	if len(value) <= opts.MaxRecordBytes {
		return []part{{value: value, part: partName}}, nil
	}
	if len(p.Sample) < 2 {
		return nil, fmt.Errorf("%w: one sample encodes to %d bytes, more than a record may hold (%d)", record.ErrTooLarge, len(value), opts.MaxRecordBytes)
	}
	half := len(p.Sample) / 2
	var out []part
	for i, samples := range [][]*profile.Sample{p.Sample[:half], p.Sample[half:]} {
		q := &profile.Profile{
			SampleType: p.SampleType, DefaultSampleType: p.DefaultSampleType, Sample: samples,
			Mapping: p.Mapping, Location: p.Location, Function: p.Function, Comments: p.Comments,
			DropFrames: p.DropFrames, KeepFrames: p.KeepFrames, TimeNanos: p.TimeNanos,
			DurationNanos: p.DurationNanos, PeriodType: p.PeriodType, Period: p.Period,
		}
		parts, err := encode(q.Compact(), record.SubPart(partName, i), opts)
		if err != nil {
			return nil, err
		}
		out = append(out, parts...)
	}
	return out, nil
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

var gzipPool = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.NoCompression)
	return zw
}}

// gzipBytes wraps raw in gzip with stored (uncompressed) deflate blocks:
// still a gzip pprof value (go tool pprof opens it), but writing it costs a
// copy and a checksum instead of deflating, and reading it the same (the
// consumers' record.DecodeProfile takes its stored-block fast path). The
// producer compresses whole batches with lz4, so Kafka stores and sends
// them compressed, as the symbolizer does with profiles.symbolized.
func gzipBytes(raw []byte) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(raw) + len(raw)/16000*5 + 64)
	zw := gzipPool.Get().(*gzip.Writer)
	defer gzipPool.Put(zw)
	zw.Reset(&buf)
	if _, err := zw.Write(raw); err != nil {
		return nil, fmt.Errorf("gzip profile: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("gzip profile: %w", err)
	}
	return buf.Bytes(), nil
}

func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

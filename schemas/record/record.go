// Package record is the Kafka record contract, version 1 (see schemas/kafka.md):
// topic names, headers, profile types, label names, and the encoding of
// profiles as gzip-compressed pprof.
package record

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// SchemaVersion is the version of this contract written into every record.
const SchemaVersion = 1

// DefaultTopicPrefix is prepended to every topic name unless configured otherwise.
const DefaultTopicPrefix = "stackstream."

// Topic suffixes; the full name is prefix + suffix.
const (
	TopicProfilesRaw        = "profiles.raw"
	TopicProfilesSymbolized = "profiles.symbolized"
	TopicDebuginfo          = "debuginfo"
	TopicDLQ                = "dlq"
)

// Topics holds the full topic names for one prefix.
type Topics struct {
	ProfilesRaw        string
	ProfilesSymbolized string
	Debuginfo          string
	DLQ                string
}

// TopicsFor returns the topic names under prefix.
func TopicsFor(prefix string) Topics {
	return Topics{
		ProfilesRaw:        prefix + TopicProfilesRaw,
		ProfilesSymbolized: prefix + TopicProfilesSymbolized,
		Debuginfo:          prefix + TopicDebuginfo,
		DLQ:                prefix + TopicDLQ,
	}
}

// All lists the topics in a stable order.
func (t Topics) All() []string {
	return []string{t.ProfilesRaw, t.ProfilesSymbolized, t.Debuginfo, t.DLQ}
}

// RollupStateTopic is the topic where the rollup group group stores its
// partitions' state (docs/ROLLUP.md, "Snapshots"): one per group, since a
// partition's older snapshots are deleted once a newer one is committed.
// Characters a topic name cannot hold become '_'.
func RollupStateTopic(prefix, group string) string {
	name := []byte(group)
	for i, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			name[i] = '_'
		}
	}
	return prefix + "rollup-state." + string(name)
}

// Header keys carried by every profile record.
const (
	HeaderSchemaVersion   = "stackstream-schema-version"
	HeaderProfileType     = "stackstream-profile-type"
	HeaderHost            = "stackstream-host"
	HeaderAgentVersion    = "stackstream-agent-version"
	HeaderContentEncoding = "content-encoding"
)

// ContentEncodingGzip is the only content encoding of profile values.
const ContentEncodingGzip = "gzip"

// ProfileType names what a profile measures.
type ProfileType string

// Profile types of contract version 1.
const (
	ProfileCPU    ProfileType = "cpu"    // eBPF samples, values in nanoseconds of CPU time
	ProfileMemory ProfileType = "memory" // resident set size per process, stack-less samples
	ProfileHeap   ProfileType = "heap"   // in-use heap scraped from pprof endpoints
	ProfileAlloc  ProfileType = "alloc"  // allocations scraped from pprof endpoints
	ProfileOffCPU ProfileType = "offcpu" // eBPF sched_switch, values in nanoseconds blocked (off the CPU)
)

// ProfileTypes lists every known profile type.
var ProfileTypes = []ProfileType{ProfileCPU, ProfileMemory, ProfileHeap, ProfileAlloc, ProfileOffCPU}

// Time reports whether t's values are nanoseconds of time (cpu, offcpu):
// they add up over a window, and divided by its length they give the
// average number of threads on (or off) the CPU.
func (t ProfileType) Time() bool { return t == ProfileCPU || t == ProfileOffCPU }

// ParseProfileType returns the type named s or ErrUnknownProfileType.
func ParseProfileType(s string) (ProfileType, error) {
	for _, t := range ProfileTypes {
		if string(t) == s {
			return t, nil
		}
	}
	return "", fmt.Errorf("%w: %q (want one of cpu, memory, heap, alloc, offcpu)", ErrUnknownProfileType, s)
}

// Errors a consumer checks with errors.Is to route a record to the DLQ.
var (
	ErrUnknownSchemaVersion = errors.New("unknown schema version")
	ErrUnknownProfileType   = errors.New("unknown profile type")
	ErrMissingHeader        = errors.New("missing header")
	ErrNotGzip              = errors.New("value is not gzip")
	ErrTooLarge             = errors.New("value too large")
	ErrNotPprof             = errors.New("value is not a pprof profile")
	// ErrInvalidProfile: the value parses as pprof but is not self-consistent
	// (a sample naming a location the profile does not define, a value count
	// that differs from the sample types, ...).
	ErrInvalidProfile = errors.New("invalid profile")
)

// Meta is what the headers of a profile record say.
type Meta struct {
	SchemaVersion   int
	Type            ProfileType
	Host            string
	AgentVersion    string
	ContentEncoding string
}

// Headers encodes m as record headers.
func (m Meta) Headers() []kgo.RecordHeader {
	enc := m.ContentEncoding
	if enc == "" {
		enc = ContentEncodingGzip
	}
	v := m.SchemaVersion
	if v == 0 {
		v = SchemaVersion
	}
	return []kgo.RecordHeader{
		{Key: HeaderSchemaVersion, Value: []byte(strconv.Itoa(v))},
		{Key: HeaderProfileType, Value: []byte(m.Type)},
		{Key: HeaderHost, Value: []byte(m.Host)},
		{Key: HeaderAgentVersion, Value: []byte(m.AgentVersion)},
		{Key: HeaderContentEncoding, Value: []byte(enc)},
	}
}

// ParseMeta reads and checks the headers of a profile record.
func ParseMeta(headers []kgo.RecordHeader) (Meta, error) {
	get := func(k string) (string, bool) {
		for _, h := range headers {
			if h.Key == k {
				return string(h.Value), true
			}
		}
		return "", false
	}
	var m Meta
	v, ok := get(HeaderSchemaVersion)
	if !ok {
		return m, fmt.Errorf("%w %s", ErrMissingHeader, HeaderSchemaVersion)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n != SchemaVersion {
		return m, fmt.Errorf("%w: %q (this build reads %d)", ErrUnknownSchemaVersion, v, SchemaVersion)
	}
	m.SchemaVersion = n
	t, ok := get(HeaderProfileType)
	if !ok {
		return m, fmt.Errorf("%w %s", ErrMissingHeader, HeaderProfileType)
	}
	if m.Type, err = ParseProfileType(t); err != nil {
		return m, err
	}
	m.Host, _ = get(HeaderHost)
	m.AgentVersion, _ = get(HeaderAgentVersion)
	m.ContentEncoding, _ = get(HeaderContentEncoding)
	if m.ContentEncoding != "" && m.ContentEncoding != ContentEncodingGzip {
		return m, fmt.Errorf("%w: content-encoding %q", ErrNotGzip, m.ContentEncoding)
	}
	return m, nil
}

// HeaderValue returns the value of header key, or "".
func HeaderValue(headers []kgo.RecordHeader, key string) string {
	for _, h := range headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// isGzip reports whether b starts with the gzip magic number.
func isGzip(b []byte) bool { return bytes.HasPrefix(b, []byte{0x1f, 0x8b}) }

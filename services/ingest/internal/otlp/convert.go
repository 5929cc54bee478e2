// Package otlp turns an OTLP profiles request (the collector's profiles
// signal, v1development, as the OpenTelemetry eBPF profiler sends it) into
// pprof profiles of the Kafka contract: one per OTLP profile, with the
// resource, scope, profile and sample attributes as sample labels, the
// profile type from the sample type, interpreted frames on the pseudo-files
// of schemas/record/frames.go and native frames on their mapping with its
// GNU build ID, so the symbolizer treats both as it treats the agent's.
package otlp

import (
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/convert"
)

// MaxLabels bounds the labels of one sample: the attributes of its
// resource, scope, profile and its own together.
const MaxLabels = 64

// Attribute keys of the OpenTelemetry semantic conventions read here.
const (
	attrServiceName = "service.name"
	attrHostName    = "host.name"
	attrFrameType   = "profile.frame.type"
	attrBuildIDGNU  = "process.executable.build_id.gnu"
	unknownService  = "unknown_service"
)

// contractKeys are attributes that have a label of the record contract.
var contractKeys = map[string]string{
	"container.id":            record.LabelContainerID,
	"k8s.pod.name":            record.LabelK8sPod,
	"k8s.namespace.name":      record.LabelK8sNamespace,
	"k8s.container.name":      record.LabelK8sContainer,
	"k8s.deployment.name":     record.LabelK8sWorkload,
	"k8s.statefulset.name":    record.LabelK8sWorkload,
	"k8s.daemonset.name":      record.LabelK8sWorkload,
	"k8s.job.name":            record.LabelK8sWorkload,
	"k8s.cronjob.name":        record.LabelK8sWorkload,
	"process.pid":             record.LabelPID,
	"thread.name":             record.LabelComm,
	"process.executable.path": record.LabelExecutable,
}

// droppedKeys are attributes not kept as labels: thread.id would make one
// series per thread (the agent keeps pid, not tid); the others are set by
// the service.
var droppedKeys = map[string]bool{"thread.id": true, attrHostName: true, attrServiceName: true}

// frameFiles are the pseudo-files of frames named by the profiler, by
// their profile.frame.type. Interpreted runtimes without a kind of their
// own in the record contract (ruby, php, perl, dotnet, beam, luajit, ...)
// are [jit]: named frames of another runtime. native, go and rust frames
// (and frames without a type) keep their mapping.
var frameFiles = map[string]string{
	"kernel":  record.MappingKernel,
	"cpython": record.MappingPython,
	"jvm":     record.MappingJava,
	"v8js":    record.MappingJS,
}

var nativeFrames = map[string]bool{"": true, "native": true, "go": true, "rust": true, "abort-marker": true}

// Profile is one OTLP profile converted.
type Profile struct {
	// Pprof is the profile as uncompressed pprof protobuf, every label on
	// its samples, service included; its sample types are those
	// convert.Classify maps to one record type.
	Pprof []byte
	// Host is host.name of the resource, scope or profile, "" without.
	Host string
	// Agent is the instrumentation scope's name, "" without.
	Agent string
	// Where names it in the request: "resource 0 scope 1 profile 2".
	Where string
}

// Rejected is an OTLP profile not converted, with why.
type Rejected struct {
	Where string // "resource 0 scope 1 profile 2"
	Err   error
}

// Convert converts every profile of pd. A profile of a sample type no
// record type holds is Rejected (convert.ErrUnsupported), the others are
// converted (profiles without samples are left out); references out of
// their table are ErrInvalid, attribute keys that are no label key once
// normalized, or too many labels, convert.ErrInvalidTag: the request is
// refused. The time window is checked when the records are made.
func Convert(pd pprofile.Profiles) ([]Profile, []Rejected, error) {
	d := newDict(pd.Dictionary())
	var out []Profile
	var rejected []Rejected
	for ri, rp := range pd.ResourceProfiles().All() {
		attrs, err := mapLabels(rp.Resource().Attributes())
		if err != nil {
			return nil, nil, fmt.Errorf("resource %d: %w", ri, err)
		}
		resLabels, resHost, err := attrLabels(nil, attrs)
		if err != nil {
			return nil, nil, fmt.Errorf("resource %d: %w", ri, err)
		}
		for si, sp := range rp.ScopeProfiles().All() {
			attrs, err := mapLabels(sp.Scope().Attributes())
			if err != nil {
				return nil, nil, fmt.Errorf("resource %d scope %d: %w", ri, si, err)
			}
			scopeLabels, scopeHost, err := attrLabels(resLabels, attrs)
			if err != nil {
				return nil, nil, fmt.Errorf("resource %d scope %d: %w", ri, si, err)
			}
			for pi, p := range sp.Profiles().All() {
				where := fmt.Sprintf("resource %d scope %d profile %d", ri, si, pi)
				attrs, err := d.labels(p.AttributeIndices())
				if err != nil {
					return nil, nil, fmt.Errorf("%s: %w", where, err)
				}
				labels, host, err := attrLabels(scopeLabels, attrs)
				if err != nil {
					return nil, nil, fmt.Errorf("%s: %w", where, err)
				}
				host = firstNonEmpty(host, scopeHost, resHost)
				prof, err := d.profile(p, labels)
				switch {
				case err != nil && isRequestError(err):
					return nil, nil, fmt.Errorf("%s: %w", where, err)
				case err != nil:
					rejected = append(rejected, Rejected{Where: where, Err: err})
				case prof != nil:
					out = append(out, Profile{Pprof: prof, Host: record.TruncateUTF8(host, record.MaxHostBytes), Agent: sp.Scope().Name(), Where: where})
				}
			}
		}
	}
	return out, rejected, nil
}

func isRequestError(err error) bool {
	return errors.Is(err, ErrInvalid) || errors.Is(err, convert.ErrInvalidTag)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// attrLabel is one attribute as a label: its label key ("" when it is not
// kept) and its value cut to record.MaxLabelValueBytes, or the host.
type attrLabel struct {
	key, value string
	host       bool
}

func toLabel(k string, v pcommon.Value) (attrLabel, error) {
	if k == attrHostName {
		return attrLabel{value: record.TruncateUTF8(valueString(v), record.MaxHostBytes), host: true}, nil
	}
	label, err := labelKey(k)
	if err != nil || label == "" {
		return attrLabel{}, err
	}
	return attrLabel{key: label, value: record.TruncateUTF8(valueString(v), record.MaxLabelValueBytes)}, nil
}

func mapLabels(m pcommon.Map) ([]attrLabel, error) {
	out := make([]attrLabel, 0, m.Len())
	for k, v := range m.All() {
		l, err := toLabel(k, v)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// attrLabels adds attrs to a copy of base as labels: contract attributes
// under their contract label, service.name under service, others with
// dots and dashes as underscores; host.name is returned apart.
func attrLabels(base map[string]string, attrs []attrLabel) (map[string]string, string, error) {
	out := make(map[string]string, len(base)+len(attrs))
	for k, v := range base {
		out[k] = v
	}
	host := ""
	for _, a := range attrs {
		switch {
		case a.host:
			host = a.value
		case a.key != "":
			out[a.key] = a.value
		}
	}
	if len(out) > MaxLabels {
		return nil, "", fmt.Errorf("%w: %d attributes, limit %d", convert.ErrInvalidTag, len(out), MaxLabels)
	}
	return out, host, nil
}

var keyReplacer = strings.NewReplacer(".", "_", "-", "_")

// labelKey is the label of an attribute key, "" for one not kept.
func labelKey(k string) (string, error) {
	if k == attrServiceName {
		return record.LabelService, nil
	}
	if droppedKeys[k] {
		return "", nil
	}
	if l, ok := contractKeys[k]; ok {
		return l, nil
	}
	l := keyReplacer.Replace(k)
	switch l {
	case record.LabelService, record.LabelHost, convert.LabelTenant:
		return "", nil
	}
	if !record.ValidLabelKey(l) {
		return "", fmt.Errorf("%w: attribute key %q: use letters, digits, dots, dashes and _ (not a digit first), at most %d bytes", convert.ErrInvalidTag, short(k), record.MaxLabelKeyBytes)
	}
	return l, nil
}

func valueString(v pcommon.Value) string {
	if v.Type() == pcommon.ValueTypeStr {
		return v.Str()
	}
	return v.AsString()
}

func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

package record

import (
	"path/filepath"
	"strings"
)

// Sample label names (string labels on every sample of a profile).
const (
	LabelPID          = "pid"
	LabelComm         = "comm"
	LabelExecutable   = "executable"
	LabelSystemdUnit  = "systemd_unit"
	LabelContainerID  = "container_id"
	LabelK8sPod       = "k8s_pod"
	LabelK8sNamespace = "k8s_namespace"
	LabelK8sContainer = "k8s_container"
	LabelK8sWorkload  = "k8s_workload"
	LabelService      = "service"
	LabelHost         = "host"
)

// DeriveService picks the service name of a process: an explicit service label,
// else the Kubernetes workload (or pod's container), else the systemd unit
// without its suffix, else the executable's base name, else comm.
func DeriveService(labels map[string]string) string {
	if s := labels[LabelService]; s != "" {
		return s
	}
	if s := labels[LabelK8sWorkload]; s != "" {
		return s
	}
	if s := labels[LabelK8sContainer]; s != "" {
		return s
	}
	if u := labels[LabelSystemdUnit]; u != "" {
		return strings.TrimSuffix(u, filepath.Ext(u))
	}
	if e := labels[LabelExecutable]; e != "" {
		return filepath.Base(e)
	}
	return labels[LabelComm]
}

// Labels flattens a sample's string labels, keeping the first value of each.
func Labels(l map[string][]string) map[string]string {
	out := make(map[string]string, len(l))
	for k, v := range l {
		if len(v) > 0 {
			out[k] = v[0]
		}
	}
	return out
}

// ContractLabels are the label names of this contract (above). The samples
// index maps each as its own keyword field (labels.<name>); any other label
// travels as a "name=value" pair, so odd keys cannot grow the mapping.
var ContractLabels = []string{
	LabelPID, LabelComm, LabelExecutable, LabelSystemdUnit, LabelContainerID,
	LabelK8sPod, LabelK8sNamespace, LabelK8sContainer, LabelK8sWorkload,
}

// IsContractLabel reports whether name is one of ContractLabels.
func IsContractLabel(name string) bool {
	for _, l := range ContractLabels {
		if l == name {
			return true
		}
	}
	return false
}

// Caps on what identifies a process in the indices: longer host names, service
// names and label values are not a real host's, and label keys outside the
// pattern below are refused, so that "a" and "a.b" cannot collide in a mapping.
const (
	MaxHostBytes       = 256
	MaxServiceBytes    = 256
	MaxLabelKeyBytes   = 64
	MaxLabelValueBytes = 512
)

// ValidLabelKey reports whether k matches [a-zA-Z_][a-zA-Z0-9_]{0,63}, the
// label key pattern of Prometheus bounded to MaxLabelKeyBytes.
func ValidLabelKey(k string) bool {
	if k == "" || len(k) > MaxLabelKeyBytes {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// TruncateUTF8 cuts s to at most n bytes without splitting a UTF-8 sequence.
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && i < len(s) && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i]
}

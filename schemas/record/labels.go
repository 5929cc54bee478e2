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

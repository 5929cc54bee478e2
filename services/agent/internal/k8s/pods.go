// Package k8s keeps the metadata of the pods on the agent's node, read from
// the Kubernetes API server (a list, then a watch), so that a process found
// in a pod's cgroup is labelled with its pod, namespace, container and
// workload. It asks for nothing but pods on one node, with a read-only token.
package k8s

import (
	"regexp"
	"strings"

	"github.com/stackstream/stackstream/schemas/record"
)

// Meta is what the agent labels a pod's process with.
type Meta struct {
	Pod       string
	Namespace string
	Container string // the container's name in the pod spec; "" if unknown
	Workload  string // the controller that owns the pod (Deployment, StatefulSet, ...)
}

// pod is one pod's metadata, as kept in the cache.
type pod struct {
	uid        string
	name       string
	namespace  string
	workload   string
	containers map[string]string // container ID (64 hex) -> container name
}

// Wire types: the few fields of a v1.Pod the cache reads. Everything else in
// the API server's JSON is skipped by the decoder.
type podJSON struct {
	Metadata struct {
		UID             string            `json:"uid"`
		Name            string            `json:"name"`
		Namespace       string            `json:"namespace"`
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
		OwnerReferences []struct {
			Kind       string `json:"kind"`
			Name       string `json:"name"`
			Controller *bool  `json:"controller"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Status struct {
		ContainerStatuses          []containerStatus `json:"containerStatuses"`
		InitContainerStatuses      []containerStatus `json:"initContainerStatuses"`
		EphemeralContainerStatuses []containerStatus `json:"ephemeralContainerStatuses"`
	} `json:"status"`
}

type containerStatus struct {
	Name        string `json:"name"`
	ContainerID string `json:"containerID"` // "<runtime>://<id>"
}

// Bounds on one pod: a pod has a few containers; names are DNS labels or
// subdomains (at most 253 bytes).
const (
	maxContainersPerPod = 64
	maxNameBytes        = 253
)

var hexID = regexp.MustCompile(`^[0-9a-f]{64}$`)

// fromJSON keeps what the cache needs of p. It returns false for an object
// that is not a pod the agent can use (no UID).
func fromJSON(p *podJSON) (*pod, bool) {
	m := &p.Metadata
	if m.UID == "" || len(m.UID) > maxNameBytes {
		return nil, false
	}
	out := &pod{
		uid:        m.UID,
		name:       clean(m.Name),
		namespace:  clean(m.Namespace),
		containers: map[string]string{},
	}
	for _, o := range m.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			out.workload = clean(workloadOf(o.Kind, o.Name, m.Labels["pod-template-hash"]))
			break
		}
	}
	for _, list := range [][]containerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for _, c := range list {
			if len(out.containers) == maxContainersPerPod {
				break
			}
			_, id, ok := strings.Cut(c.ContainerID, "://")
			if ok && hexID.MatchString(id) {
				out.containers[id] = clean(c.Name)
			}
		}
	}
	return out, true
}

// workloadOf names the workload behind a pod's controller: a ReplicaSet made
// by a Deployment is named <deployment>-<pod-template-hash>, and a Job made
// by a CronJob <cronjob>-<scheduled minute>; other controllers (StatefulSet,
// DaemonSet, a bare ReplicaSet or Job) are the workload themselves.
func workloadOf(kind, name, templateHash string) string {
	switch kind {
	case "ReplicaSet":
		if templateHash != "" {
			if d, ok := strings.CutSuffix(name, "-"+templateHash); ok && d != "" {
				return d
			}
		}
	case "Job":
		if i := strings.LastIndexByte(name, '-'); i > 0 && i < len(name)-1 && allDigits(name[i+1:]) && len(name)-i-1 >= 8 {
			return name[:i]
		}
	}
	return name
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// clean bounds a name from the API server as any label value is bounded.
func clean(s string) string {
	return record.TruncateUTF8(strings.ToValidUTF8(s, "\uFFFD"), maxNameBytes)
}

// meta returns the labels of the process running in container id of p.
func (p *pod) meta(containerID string) Meta {
	return Meta{Pod: p.name, Namespace: p.namespace, Container: p.containers[containerID], Workload: p.workload}
}

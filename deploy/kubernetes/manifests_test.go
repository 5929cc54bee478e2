package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kustomizations are every directory users build; components are built through the
// overlay that includes them.
var kustomizations = []string{"base", "overlays/example"}

// agentCaps are the capabilities the agent's container adds, exactly (docs/DEPLOY.md).
var agentCaps = []corev1.Capability{"BPF", "PERFMON", "SYS_PTRACE", "SYSLOG", "CHECKPOINT_RESTORE", "KILL", "CHOWN", "SETUID", "SETGID"}

// consumers are the Kafka consumer groups: Deployments probed on /readyz, with a lag
// metric to scale on, reaching only the brokers (and OpenSearch where they write).
var consumers = map[string]struct {
	metricsFile string // where the lag metric is registered
	egressPorts []int32
}{
	"symbolizer": {"services/symbolizer/internal/pipeline/metrics.go", []int32{53, 9092}},
	"indexer":    {"services/indexer/internal/indexer/metrics.go", []int32{53, 9092, 9200}},
	"rollup":     {"services/rollup/internal/pipeline/metrics.go", []int32{53, 9092, 9200}},
}

// apis are the services reached through a Service on their port.
var apis = map[string]int32{"query": 8080, "ingest": 4040}

// partitions is what stackctl init creates by default (STACKSTREAM_CTL_PARTITIONS):
// more instances of one group than partitions stand idle.
const partitions = 6

// objects is one built kustomization, decoded.
type objects struct {
	namespaces  []corev1.Namespace
	accounts    []corev1.ServiceAccount
	configMaps  []corev1.ConfigMap
	secrets     []corev1.Secret
	services    []corev1.Service
	daemonSets  []appsv1.DaemonSet
	deployments []appsv1.Deployment
	pdbs        []policyv1.PodDisruptionBudget
	policies    []networkingv1.NetworkPolicy
	hpas        []autoscalingv2.HorizontalPodAutoscaler
	roles       []rbacv1.ClusterRole
	bindings    []rbacv1.ClusterRoleBinding
}

// build runs kustomize on dir as `kustomize build` would, and decodes every object
// into its k8s.io/api type, refusing unknown fields.
func build(t *testing.T, dir string) *objects {
	t.Helper()
	var o objects
	for _, m := range render(t, dir) {
		if err := o.add(m.apiVersion, m.kind, m.yaml); err != nil {
			t.Fatalf("%s: %s %s: %v", dir, m.kind, m.name, err)
		}
	}
	return &o
}

// manifest is one object of a built kustomization, as YAML.
type manifest struct {
	apiVersion, kind, namespace, name string
	yaml                              []byte
}

// render runs kustomize on dir as `kustomize build` would.
func render(t *testing.T, dir string) []manifest {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var ms []manifest
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatalf("%s: encode %s: %v", dir, r.CurId(), err)
		}
		ms = append(ms, manifest{r.GetApiVersion(), r.GetKind(), r.GetNamespace(), r.GetName(), y})
	}
	return ms
}

func (o *objects) add(apiVersion, kind string, y []byte) error {
	decode := func(into any) error { return yaml.UnmarshalStrict(y, into) }
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		return appendDecoded(&o.namespaces, decode)
	case "v1 ServiceAccount":
		return appendDecoded(&o.accounts, decode)
	case "v1 ConfigMap":
		return appendDecoded(&o.configMaps, decode)
	case "v1 Secret":
		return appendDecoded(&o.secrets, decode)
	case "v1 Service":
		return appendDecoded(&o.services, decode)
	case "apps/v1 DaemonSet":
		return appendDecoded(&o.daemonSets, decode)
	case "apps/v1 Deployment":
		return appendDecoded(&o.deployments, decode)
	case "policy/v1 PodDisruptionBudget":
		return appendDecoded(&o.pdbs, decode)
	case "networking.k8s.io/v1 NetworkPolicy":
		return appendDecoded(&o.policies, decode)
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return appendDecoded(&o.hpas, decode)
	case "rbac.authorization.k8s.io/v1 ClusterRole":
		return appendDecoded(&o.roles, decode)
	case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
		return appendDecoded(&o.bindings, decode)
	}
	return fmt.Errorf("no k8s.io/api type for %s %s: add it to objects", apiVersion, kind)
}

func appendDecoded[T any](list *[]T, decode func(any) error) error {
	var v T
	if err := decode(&v); err != nil {
		return fmt.Errorf("decode strictly: %w", err)
	}
	*list = append(*list, v)
	return nil
}

// workload is a pod template with the service it runs.
type workload struct {
	kind, name, service string // service: "agent", "query", ...
	labels              map[string]string
	pod                 corev1.PodSpec
}

func (o *objects) workloads() []workload {
	var ws []workload
	for _, d := range o.daemonSets {
		ws = append(ws, workload{"DaemonSet", d.Name, strings.TrimPrefix(d.Name, "stackstream-"), d.Spec.Template.Labels, d.Spec.Template.Spec})
	}
	for _, d := range o.deployments {
		service := strings.TrimSuffix(strings.TrimPrefix(d.Name, "stackstream-"), "-reindex")
		ws = append(ws, workload{"Deployment", d.Name, service, d.Spec.Template.Labels, d.Spec.Template.Spec})
	}
	return ws
}

func (o *objects) deployment(name string) *appsv1.Deployment {
	for i := range o.deployments {
		if o.deployments[i].Name == name {
			return &o.deployments[i]
		}
	}
	return nil
}

func (o *objects) configMap(name string) *corev1.ConfigMap {
	for i := range o.configMaps {
		if o.configMaps[i].Name == name {
			return &o.configMaps[i]
		}
	}
	return nil
}

func TestDecodeStrictly(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			o := build(t, dir)
			want := len(consumers) + len(apis) + len(reindexCopies)
			if len(o.daemonSets) != 1 || len(o.deployments) != want {
				t.Fatalf("%d DaemonSets and %d Deployments, want 1 and %d", len(o.daemonSets), len(o.deployments), want)
			}
			// Secrets are created by the operator (base/secrets.example.yaml), never
			// shipped with placeholder values.
			if len(o.secrets) != 0 {
				t.Errorf("the build holds %d Secrets; credentials must come from Secrets the operator creates", len(o.secrets))
			}
		})
	}
}

func TestNoPrivilegedContainer(t *testing.T) {
	for _, dir := range kustomizations {
		o := build(t, dir)
		for _, w := range o.workloads() {
			if w.pod.HostNetwork || w.pod.HostIPC {
				t.Errorf("%s: %s %s uses the host's network or IPC namespace", dir, w.kind, w.name)
			}
			if w.pod.HostPID && w.service != "agent" {
				t.Errorf("%s: %s %s has hostPID; only the agent needs it", dir, w.kind, w.name)
			}
			// Only the agent calls the API server (its node's pods, read-only:
			// checkAgentRBAC).
			if w.service != "agent" && (w.pod.AutomountServiceAccountToken == nil || *w.pod.AutomountServiceAccountToken) {
				t.Errorf("%s: %s %s mounts a service account token; only the agent calls the API server", dir, w.kind, w.name)
			}
			for _, c := range allContainers(w.pod) {
				sc := c.SecurityContext
				if sc == nil {
					t.Errorf("%s: %s/%s has no securityContext", dir, w.name, c.Name)
					continue
				}
				if sc.Privileged == nil || *sc.Privileged {
					t.Errorf("%s: %s/%s: privileged must be set to false", dir, w.name, c.Name)
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					t.Errorf("%s: %s/%s: allowPrivilegeEscalation must be false", dir, w.name, c.Name)
				}
				if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("%s: %s/%s: readOnlyRootFilesystem must be true", dir, w.name, c.Name)
				}
				if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
					t.Errorf("%s: %s/%s: capabilities must drop ALL", dir, w.name, c.Name)
				}
				if w.service != "agent" {
					if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
						t.Errorf("%s: %s/%s adds capabilities %v", dir, w.name, c.Name, sc.Capabilities.Add)
					}
					if !runsAsNonRoot(w.pod, c) {
						t.Errorf("%s: %s/%s: runAsNonRoot must be true", dir, w.name, c.Name)
					}
				}
				if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
					t.Errorf("%s: %s/%s needs CPU and memory requests and a memory limit", dir, w.name, c.Name)
				}
			}
		}
	}
}

func allContainers(p corev1.PodSpec) []corev1.Container {
	return append(slices.Clone(p.InitContainers), p.Containers...)
}

func runsAsNonRoot(p corev1.PodSpec, c corev1.Container) bool {
	if c.SecurityContext != nil && c.SecurityContext.RunAsNonRoot != nil {
		return *c.SecurityContext.RunAsNonRoot
	}
	return p.SecurityContext != nil && p.SecurityContext.RunAsNonRoot != nil && *p.SecurityContext.RunAsNonRoot
}

func TestAgentDaemonSet(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			o := build(t, dir)
			ds := o.daemonSets[0]
			pod := ds.Spec.Template.Spec
			if ds.Name != "stackstream-agent" || !pod.HostPID {
				t.Fatalf("DaemonSet %s hostPID=%v, want stackstream-agent with hostPID", ds.Name, pod.HostPID)
			}
			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers, want the agent alone", len(pod.Containers))
			}
			c := pod.Containers[0]
			if got := c.SecurityContext.Capabilities.Add; !slices.Equal(got, agentCaps) {
				t.Errorf("capabilities %v, want exactly %v", got, agentCaps)
			}
			// Host paths: exactly the host's /proc and the kernel's BTF, read-only, and
			// the unwind table cache, the only one written, where the agent's default
			// STACKSTREAM_AGENT_UNWIND_CACHE_DIR lies.
			const cache = "/var/cache/stackstream-agent"
			want := map[string]string{"/proc": "/host/proc", "/sys/kernel/btf": "/sys/kernel/btf", cache: cache}
			for _, v := range pod.Volumes {
				if v.HostPath == nil {
					continue
				}
				at, ok := want[v.HostPath.Path]
				if !ok {
					t.Errorf("host path %s mounted; the agent needs only %v", v.HostPath.Path, want)
					continue
				}
				delete(want, v.HostPath.Path)
				m := mountOf(c, v.Name)
				if m == nil || m.MountPath != at || m.ReadOnly != (at != cache) {
					t.Errorf("host path %s: mount %+v, want it at %s, read-only but for the cache", v.HostPath.Path, m, at)
				}
			}
			if v := envVar(c, "STACKSTREAM_AGENT_UNWIND_CACHE_DIR"); v != nil && !strings.HasPrefix(v.Value, cache+"/") {
				t.Errorf("STACKSTREAM_AGENT_UNWIND_CACHE_DIR = %q, not in the mounted %s", v.Value, cache)
			}
			if len(want) > 0 {
				t.Errorf("host paths not mounted: %v", want)
			}
			if v := envVar(c, "STACKSTREAM_AGENT_PROC_ROOT"); v == nil || v.Value != "/host/proc" {
				t.Errorf("STACKSTREAM_AGENT_PROC_ROOT = %+v, want /host/proc", v)
			}
			host := envVar(c, "STACKSTREAM_AGENT_HOST_ID")
			if host == nil || host.ValueFrom == nil || host.ValueFrom.FieldRef == nil || host.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
				t.Errorf("STACKSTREAM_AGENT_HOST_ID = %+v, want the node name (fieldRef spec.nodeName)", host)
			}
			checkProbes(t, "agent", c)
			checkAgentRBAC(t, o, pod)
		})
	}
}

// checkAgentRBAC: the agent's token is mounted, and it may only get, list and
// watch pods (the node's pods, for their labels), bound to its own account in
// the namespace the account is in.
func checkAgentRBAC(t *testing.T, o *objects, pod corev1.PodSpec) {
	t.Helper()
	if pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Errorf("agent pod does not mount its service account token: it cannot watch pods")
	}
	if len(o.roles) != 1 || len(o.bindings) != 1 {
		t.Fatalf("%d ClusterRoles and %d bindings, want the agent's one each", len(o.roles), len(o.bindings))
	}
	rules := o.roles[0].Rules
	if len(rules) != 1 || !slices.Equal(rules[0].APIGroups, []string{""}) || !slices.Equal(rules[0].Resources, []string{"pods"}) ||
		!slices.Equal(rules[0].Verbs, []string{"get", "list", "watch"}) || len(rules[0].ResourceNames) != 0 {
		t.Errorf("agent ClusterRole rules %+v, want get, list, watch on pods only", rules)
	}
	b := o.bindings[0]
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != o.roles[0].Name {
		t.Errorf("binding refers to %+v, want the agent's ClusterRole %s", b.RoleRef, o.roles[0].Name)
	}
	var sa *corev1.ServiceAccount
	for i := range o.accounts {
		if o.accounts[i].Name == pod.ServiceAccountName {
			sa = &o.accounts[i]
		}
	}
	if sa == nil {
		t.Fatalf("agent's service account %q not defined", pod.ServiceAccountName)
	}
	ns := sa.Namespace
	if ns == "" {
		ns = "default"
	}
	if len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != sa.Name || b.Subjects[0].Namespace != ns {
		t.Errorf("binding subjects %+v, want the ServiceAccount %s/%s", b.Subjects, ns, sa.Name)
	}
}

func mountOf(c corev1.Container, volume string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == volume {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// checkProbes: readiness on /readyz and liveness on /healthz, on a port the container
// declares.
func checkProbes(t *testing.T, name string, c corev1.Container) {
	t.Helper()
	for _, p := range []struct {
		kind  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s: %s probe %+v, want an HTTP GET of %s", name, p.kind, p.probe, p.path)
			continue
		}
		if containerPort(c, p.probe.HTTPGet.Port) == 0 {
			t.Errorf("%s: %s probe port %s is not a port of the container", name, p.kind, p.probe.HTTPGet.Port.String())
		}
	}
}

func containerPort(c corev1.Container, port intstr.IntOrString) int32 {
	for _, p := range c.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return p.ContainerPort
		}
	}
	return 0
}

func TestConsumers(t *testing.T) {
	for _, dir := range kustomizations {
		o := build(t, dir)
		for name := range consumers {
			t.Run(dir+"/"+name, func(t *testing.T) {
				d := o.deployment("stackstream-" + name)
				if d == nil {
					t.Fatalf("no Deployment stackstream-%s", name)
				}
				checkProbes(t, name, d.Spec.Template.Spec.Containers[0])
				checkPDB(t, o, d)
				checkEgressOnly(t, o, d, consumers[name].egressPorts)
			})
		}
	}
}

func checkPDB(t *testing.T, o *objects, d *appsv1.Deployment) {
	t.Helper()
	for _, p := range o.pdbs {
		if p.Spec.Selector != nil && selects(p.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
			return
		}
	}
	t.Errorf("no PodDisruptionBudget selects %s", d.Name)
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// checkEgressOnly: a NetworkPolicy restricts the pods' egress to the given ports,
// each rule naming its peers (no rule open to every destination).
func checkEgressOnly(t *testing.T, o *objects, d *appsv1.Deployment, ports []int32) {
	t.Helper()
	var found bool
	for _, p := range o.policies {
		if !selects(p.Spec.PodSelector.MatchLabels, d.Spec.Template.Labels) {
			continue
		}
		if !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			continue
		}
		found = true
		for i, r := range p.Spec.Egress {
			if len(r.To) == 0 || len(r.Ports) == 0 {
				t.Errorf("%s: egress rule %d of %s allows every destination or port", d.Name, i, p.Name)
			}
			for _, port := range r.Ports {
				if port.Port == nil || port.Port.Type != intstr.Int || !slices.Contains(ports, port.Port.IntVal) {
					t.Errorf("%s: egress rule %d of %s opens port %v; allowed: %v", d.Name, i, p.Name, port.Port, ports)
				}
			}
		}
	}
	if !found {
		t.Errorf("no NetworkPolicy restricts the egress of %s", d.Name)
	}
}

func TestAPIServices(t *testing.T) {
	for _, dir := range kustomizations {
		o := build(t, dir)
		for name, port := range apis {
			t.Run(dir+"/"+name, func(t *testing.T) {
				d := o.deployment("stackstream-" + name)
				if d == nil {
					t.Fatalf("no Deployment stackstream-%s", name)
				}
				c := d.Spec.Template.Spec.Containers[0]
				checkProbes(t, name, c)
				checkPDB(t, o, d)
				var served bool
				for _, s := range o.services {
					if !selects(s.Spec.Selector, d.Spec.Template.Labels) {
						continue
					}
					for _, sp := range s.Spec.Ports {
						if sp.Port == port && containerPort(c, sp.TargetPort) == port {
							served = true
						}
					}
				}
				if !served {
					t.Errorf("no Service exposes port %d of %s", port, d.Name)
				}
				var admitted bool
				for _, p := range o.policies {
					if !selects(p.Spec.PodSelector.MatchLabels, d.Spec.Template.Labels) {
						continue
					}
					for _, r := range p.Spec.Ingress {
						for _, rp := range r.Ports {
							if rp.Port != nil && rp.Port.IntVal == port {
								admitted = true
							}
						}
					}
				}
				if !admitted {
					t.Errorf("no NetworkPolicy admits port %d of %s", port, d.Name)
				}
			})
		}
	}
}

// TestSecretsDocumented: every Secret a workload reads is one of base/secrets.example.yaml's
// names and keys.
func TestSecretsDocumented(t *testing.T) {
	documented := map[string]map[string]bool{}
	b, err := os.ReadFile("base/secrets.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var s corev1.Secret
		if err := yaml.UnmarshalStrict(doc, &s); err != nil {
			t.Fatalf("base/secrets.example.yaml: %v", err)
		}
		documented[s.Name] = map[string]bool{}
		for k := range s.StringData {
			documented[s.Name][k] = true
		}
	}
	for _, dir := range kustomizations {
		o := build(t, dir)
		var refs int
		for _, w := range o.workloads() {
			for _, c := range allContainers(w.pod) {
				for _, e := range c.Env {
					if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
						continue
					}
					refs++
					r := e.ValueFrom.SecretKeyRef
					if !documented[r.Name][r.Key] {
						t.Errorf("%s: %s/%s reads %s from Secret %s key %s, which base/secrets.example.yaml does not document", dir, w.name, c.Name, e.Name, r.Name, r.Key)
					}
				}
				for _, f := range c.EnvFrom {
					if f.SecretRef != nil {
						t.Errorf("%s: %s/%s takes every key of Secret %s; name each variable instead", dir, w.name, c.Name, f.SecretRef.Name)
					}
				}
			}
			for _, v := range w.pod.Volumes {
				if v.Secret != nil && documented[v.Secret.SecretName] == nil {
					t.Errorf("%s: %s mounts Secret %s, which base/secrets.example.yaml does not document", dir, w.name, v.Secret.SecretName)
				}
			}
		}
		if refs == 0 {
			t.Errorf("%s: no workload reads a Secret", dir)
		}
	}
}

func TestLagAutoscaling(t *testing.T) {
	o := build(t, "overlays/example")
	scaled := map[string]bool{}
	for _, h := range o.hpas {
		ref := h.Spec.ScaleTargetRef
		d := o.deployment(ref.Name)
		if ref.Kind != "Deployment" || d == nil {
			t.Errorf("%s scales %s %s, which the build does not hold", h.Name, ref.Kind, ref.Name)
			continue
		}
		name := strings.TrimPrefix(d.Name, "stackstream-")
		c, ok := consumers[name]
		if !ok {
			t.Errorf("%s scales %s, not a consumer", h.Name, d.Name)
			continue
		}
		scaled[name] = true
		if d.Spec.Replicas != nil {
			t.Errorf("%s sets replicas; the autoscaler owns them", d.Name)
		}
		if h.Spec.MaxReplicas > partitions {
			t.Errorf("%s: maxReplicas %d > %d partitions: the extra instances would get none", h.Name, h.Spec.MaxReplicas, partitions)
		}
		exported := lagMetrics(t, c.metricsFile)
		for _, m := range h.Spec.Metrics {
			if m.Type != autoscalingv2.ExternalMetricSourceType || m.External == nil {
				t.Errorf("%s: metric %s, want External (the lag of the whole group)", h.Name, m.Type)
				continue
			}
			if !slices.Contains(exported, m.External.Metric.Name) {
				t.Errorf("%s: metric %s is not a lag metric %s registers (%v)", h.Name, m.External.Metric.Name, c.metricsFile, exported)
			}
			if m.External.Target.Type != autoscalingv2.AverageValueMetricType {
				t.Errorf("%s: target %s, want AverageValue (the group's lag divided by the replicas)", h.Name, m.External.Target.Type)
			}
		}
	}
	for name := range consumers {
		if !scaled[name] {
			t.Errorf("no HorizontalPodAutoscaler for %s", name)
		}
	}
}

func TestOverlaySetsImagesAndEndpoints(t *testing.T) {
	base, overlay := build(t, "base"), build(t, "overlays/example")
	for _, w := range overlay.workloads() {
		for _, c := range w.pod.Containers {
			if !strings.HasPrefix(c.Image, "stackstream/stackstream-"+w.service+":") || strings.HasSuffix(c.Image, ":dev") {
				t.Errorf("%s/%s: image %s, want stackstream/stackstream-%s with the overlay's tag", w.name, c.Name, c.Image, w.service)
			}
		}
	}
	for _, v := range []struct{ configMap, key string }{
		{"stackstream-kafka", "STACKSTREAM_KAFKA_BROKERS"},
		{"stackstream-opensearch", "STACKSTREAM_OPENSEARCH_URL"},
	} {
		b, o := configMapByPrefix(base, v.configMap), configMapByPrefix(overlay, v.configMap)
		if b == nil || o == nil {
			t.Fatalf("ConfigMap %s missing (base %v, overlay %v)", v.configMap, b != nil, o != nil)
		}
		if o.Data[v.key] == "" || o.Data[v.key] == b.Data[v.key] {
			t.Errorf("overlay %s = %q, want its own value (base %q)", v.key, o.Data[v.key], b.Data[v.key])
		}
	}
}

// configMapByPrefix finds a generated ConfigMap by its name without the content hash.
func configMapByPrefix(o *objects, name string) *corev1.ConfigMap {
	for i := range o.configMaps {
		if n := o.configMaps[i].Name; n == name || strings.HasPrefix(n, name+"-") {
			return &o.configMaps[i]
		}
	}
	return nil
}

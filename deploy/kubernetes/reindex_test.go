package kubernetes

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// reindexCopies are the consumers base/reindex copies for `stackctl reindex`, with the
// variable naming each one's consumer group.
var reindexCopies = map[string]string{"indexer": "STACKSTREAM_INDEXER_GROUP", "rollup": "STACKSTREAM_ROLLUP_GROUP"}

// generationVar is the variable that points a consumer at an index generation.
const generationVar = "STACKSTREAM_OPENSEARCH_INDEX_GENERATION"

// TestReindexCopies: the temporary consumers of a reindex are idle copies of the live
// ones that no live selector, budget, policy or autoscaler takes for live pods, read
// their generation from one ConfigMap, and derive from it the group stackctl reindex
// expects (pkg/opensearch ReindexGroup: <live group>.reindex-g<generation>).
func TestReindexCopies(t *testing.T) {
	for _, dir := range kustomizations {
		o := build(t, dir)
		for service, groupVar := range reindexCopies {
			t.Run(dir+"/"+service, func(t *testing.T) {
				live, cp := o.deployment("stackstream-"+service), o.deployment("stackstream-"+service+"-reindex")
				if live == nil || cp == nil {
					t.Fatalf("Deployments stackstream-%s and stackstream-%s-reindex: found %v, %v", service, service, live != nil, cp != nil)
				}
				if cp.Spec.Replicas == nil || *cp.Spec.Replicas != 0 {
					t.Errorf("%s: replicas %v, want 0 until a reindex", cp.Name, cp.Spec.Replicas)
				}
				checkApart(t, o, live, cp)
				checkProbes(t, service, cp.Spec.Template.Spec.Containers[0])
				checkPDB(t, o, cp)
				checkEgressOnly(t, o, cp, consumers[service].egressPorts)
				checkSameSpec(t, live, cp)
				checkGeneration(t, o, cp, groupVar, "stackstream-"+service)
			})
		}
		for _, h := range o.hpas {
			if strings.HasSuffix(h.Spec.ScaleTargetRef.Name, "-reindex") {
				t.Errorf("%s: HorizontalPodAutoscaler %s scales the reindex copy %s", dir, h.Name, h.Spec.ScaleTargetRef.Name)
			}
		}
	}
}

// checkApart: no selector of the live objects matches the copy's pods, nor the reverse.
func checkApart(t *testing.T, o *objects, live, cp *appsv1.Deployment) {
	t.Helper()
	if selects(live.Spec.Selector.MatchLabels, cp.Spec.Template.Labels) || selects(cp.Spec.Selector.MatchLabels, live.Spec.Template.Labels) {
		t.Errorf("the selectors of %s and %s overlap", live.Name, cp.Name)
	}
	for _, p := range o.pdbs {
		if selects(p.Spec.Selector.MatchLabels, live.Spec.Template.Labels) && selects(p.Spec.Selector.MatchLabels, cp.Spec.Template.Labels) {
			t.Errorf("PodDisruptionBudget %s counts both %s and %s", p.Name, live.Name, cp.Name)
		}
	}
	if cp.Labels["app.kubernetes.io/component"] != "reindex" || cp.Spec.Template.Labels["app.kubernetes.io/component"] != "reindex" {
		t.Errorf("%s: app.kubernetes.io/component %q (pods %q), want reindex", cp.Name, cp.Labels["app.kubernetes.io/component"], cp.Spec.Template.Labels["app.kubernetes.io/component"])
	}
}

// checkSameSpec: the copy runs what the live Deployment runs (image, resources,
// security, shared settings); only the generation and the group are added.
func checkSameSpec(t *testing.T, live, cp *appsv1.Deployment) {
	t.Helper()
	l, c := live.Spec.Template.Spec.Containers[0], cp.Spec.Template.Spec.Containers[0]
	if l.Image != c.Image || !l.Resources.Limits.Cpu().Equal(*c.Resources.Limits.Cpu()) || !l.Resources.Requests.Memory().Equal(*c.Resources.Requests.Memory()) {
		t.Errorf("%s: image %s, resources %v; the live %s has %s, %v", cp.Name, c.Image, c.Resources, live.Name, l.Image, l.Resources)
	}
	if *c.SecurityContext.ReadOnlyRootFilesystem != *l.SecurityContext.ReadOnlyRootFilesystem || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("%s: security context differs from %s", cp.Name, live.Name)
	}
	for _, e := range l.EnvFrom {
		if !slices.ContainsFunc(c.EnvFrom, func(x corev1.EnvFromSource) bool { return x.ConfigMapRef.Name == e.ConfigMapRef.Name }) {
			t.Errorf("%s does not read ConfigMap %s, which %s reads", cp.Name, e.ConfigMapRef.Name, live.Name)
		}
	}
}

// checkGeneration: the generation comes from the ConfigMap stackstream-reindex, whose
// base value is not a number (a copy scaled up before it is set refuses to start), and
// the group is the live one's reindex group for that generation, as the kubelet
// expands $(VAR): a variable of envFrom or of an earlier env entry.
func checkGeneration(t *testing.T, o *objects, cp *appsv1.Deployment, groupVar, liveGroup string) {
	t.Helper()
	c := cp.Spec.Template.Spec.Containers[0]
	var gen string
	for _, e := range c.EnvFrom {
		cm := o.configMap(e.ConfigMapRef.Name)
		if cm == nil {
			t.Fatalf("%s reads ConfigMap %s, which the build lacks", cp.Name, e.ConfigMapRef.Name)
		}
		if v, ok := cm.Data[generationVar]; ok {
			if !strings.HasPrefix(cm.Name, "stackstream-reindex-") {
				t.Errorf("%s: %s comes from %s, want stackstream-reindex", cp.Name, generationVar, cm.Name)
			}
			gen = v
		}
	}
	if _, err := strconv.Atoi(gen); err == nil || gen == "" {
		t.Errorf("%s: %s is %q in the build; until an overlay sets it, it must not parse as a generation", cp.Name, generationVar, gen)
	}
	var group string
	for _, e := range c.Env {
		switch e.Name {
		case generationVar:
			t.Errorf("%s: %s set in env, which would hide the ConfigMap's value", cp.Name, generationVar)
		case groupVar:
			group = e.Value
		}
	}
	// The group as the kubelet builds it for generation 7, and as stackctl names it.
	expanded := strings.ReplaceAll(group, "$("+generationVar+")", "7")
	if want := liveGroup + ".reindex-g7"; expanded != want {
		t.Errorf("%s: %s=%q gives %q for generation 7, want %q", cp.Name, groupVar, group, expanded, want)
	}
}

// TestReindexOverlay: an overlay sets the generation as base/reindex's comment shows
// (testdata/reindex), and both copies then read that number.
func TestReindexOverlay(t *testing.T) {
	o := build(t, "testdata/reindex")
	for service := range reindexCopies {
		cp := o.deployment("stackstream-" + service + "-reindex")
		if cp == nil {
			t.Fatalf("no stackstream-%s-reindex", service)
		}
		var gen string
		for _, e := range cp.Spec.Template.Spec.Containers[0].EnvFrom {
			if cm := o.configMap(e.ConfigMapRef.Name); cm != nil && cm.Data[generationVar] != "" {
				gen = cm.Data[generationVar]
			}
		}
		if gen != "3" {
			t.Errorf("%s reads %s=%q, want the overlay's 3", cp.Name, generationVar, gen)
		}
	}
}

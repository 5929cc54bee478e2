package agent

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

// fakePods answers GET /api/v1/pods as an API server does for one node: the
// list holds the pods given at start; a watch sends what the test adds later.
type fakePods struct {
	mu    sync.Mutex
	pods  []any
	added chan any
	node  string
}

func (f *fakePods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/pods" || r.Header.Get("Authorization") != "Bearer test-token" ||
		r.URL.Query().Get("fieldSelector") != "spec.nodeName="+f.node {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	if r.URL.Query().Get("watch") == "1" {
		w.Header().Set("Content-Type", "application/json")
		w.(http.Flusher).Flush()
		for {
			select {
			case p := <-f.added:
				f.mu.Lock()
				f.pods = append(f.pods, p)
				f.mu.Unlock()
				b, _ := json.Marshal(map[string]any{"type": "ADDED", "object": p})
				w.Write(append(b, '\n'))
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	json.NewEncoder(w).Encode(map[string]any{"kind": "PodList", "metadata": map[string]any{"resourceVersion": "1"}, "items": f.pods})
}

func fakePod(uid, name, ns, deployment, hash, container, containerID string) any {
	return map[string]any{
		"kind": "Pod", "apiVersion": "v1",
		"metadata": map[string]any{
			"uid": uid, "name": name, "namespace": ns, "resourceVersion": "2",
			"labels":          map[string]string{"pod-template-hash": hash},
			"ownerReferences": []map[string]any{{"kind": "ReplicaSet", "name": deployment + "-" + hash, "controller": true}},
		},
		"status": map[string]any{"containerStatuses": []map[string]any{{"name": container, "containerID": "containerd://" + containerID}}},
	}
}

// placeInPod moves pid into a cgroup named as the kubelet's systemd driver
// names a container's: kubepods.slice/.../kubepods-besteffort-pod<uid>.slice/
// cri-containerd-<id>.scope.
func placeInPod(t *testing.T, pid int, uid, containerID string) {
	t.Helper()
	root := "/sys/fs/cgroup/systemd"
	if _, err := os.Stat(root + "/cgroup.procs"); err != nil {
		root = "/sys/fs/cgroup"
	}
	qos := filepath.Join(root, "kubepods-test.slice", "kubepods-besteffort.slice")
	pod := filepath.Join(qos, "kubepods-besteffort-pod"+strings.ReplaceAll(uid, "-", "_")+".slice")
	dir := filepath.Join(pod, "cri-containerd-"+containerID+".scope")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0o644); err != nil {
		t.Fatalf("move pid %d into %s: %v", pid, dir, err)
	}
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0o644)
		for _, d := range []string{dir, pod, qos, filepath.Dir(qos)} {
			os.Remove(d)
		}
	})
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	if cg := proc.ParseCgroup(string(b)); cg.K8sPodUID != uid || cg.ContainerID != containerID {
		t.Fatalf("pid %d cgroup %q parses as pod %q container %q", pid, b, cg.K8sPodUID, cg.ContainerID)
	}
}

// TestKubernetesLabels runs two processes in pod-shaped cgroups against an
// API server faked by its answers only: the pod listed at start labels its
// process from the first profile; the pod that appears by a watch event
// later labels its process from then on. Service is the workload.
func TestKubernetesLabels(t *testing.T) {
	e := newEnv(t)
	const (
		uidA = "0f8c1b2a-1111-4a5b-8c9d-0123456789ab"
		uidB = "7e6d5c4b-2222-4a5b-8c9d-ba9876543210"
		cidA = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"
		cidB = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2"
	)
	exe := workload.BuildC(t, t.TempDir(), "podwork", false)
	pa := workload.Start(t, exe, 0)
	pb := workload.Start(t, exe, 0)
	placeInPod(t, pa.PID, uidA, cidA)
	placeInPod(t, pb.PID, uidB, cidB)

	api := &fakePods{node: "test-host", added: make(chan any, 1),
		pods: []any{fakePod(uidA, "checkout-5d8f9c7b4-abcde", "shop", "checkout", "5d8f9c7b4", "server", cidA)}}
	srv := httptest.NewTLSServer(api)
	defer srv.Close()
	dir := t.TempDir()
	ca, tok := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600)
	os.WriteFile(tok, []byte("test-token"), 0o600)

	a := start(t, e, Config{PIDs: []int{pa.PID, pb.PID}, Kubernetes: "on", KubernetesAPI: srv.URL,
		KubernetesTokenFile: tok, KubernetesCAFile: ca})
	time.Sleep(2500 * time.Millisecond)
	api.added <- fakePod(uidB, "search-6b7c8d9e5-fghij", "catalog", "search", "6b7c8d9e5", "indexer", cidB)
	time.Sleep(3500 * time.Millisecond)
	a.stop(t)
	got := consume(t, e)

	check := func(s map[string][]string, pod, ns, container, workload string) bool {
		return s[record.LabelK8sPod][0] == pod && s[record.LabelK8sNamespace][0] == ns &&
			s[record.LabelK8sContainer][0] == container && s[record.LabelK8sWorkload][0] == workload &&
			s[record.LabelService][0] == workload
	}
	sa := pidSamples(got.cpu, pa.PID)
	if len(sa) == 0 {
		t.Fatal("no samples of the listed pod's process")
	}
	for _, s := range sa {
		if len(s.Label[record.LabelK8sWorkload]) == 0 || !check(s.Label, "checkout-5d8f9c7b4-abcde", "shop", "server", "checkout") {
			t.Fatalf("listed pod's sample labels %v", s.Label)
		}
	}
	// The watched pod: unlabelled (beyond its cgroup's facts) until its
	// event arrived, labelled in every profile after.
	labelled, before := 0, 0
	for _, p := range got.cpu {
		for _, s := range p.Sample {
			if len(s.Label[record.LabelPID]) != 1 || s.Label[record.LabelPID][0] != fmt.Sprint(pb.PID) {
				continue
			}
			if len(s.Label[record.LabelK8sWorkload]) == 0 {
				if labelled > 0 {
					t.Fatalf("watched pod's process unlabelled again after being labelled: %v", s.Label)
				}
				before++
				continue
			}
			if !check(s.Label, "search-6b7c8d9e5-fghij", "catalog", "indexer", "search") {
				t.Fatalf("watched pod's sample labels %v", s.Label)
			}
			labelled++
		}
	}
	if labelled == 0 || before == 0 {
		t.Fatalf("watched pod's process: %d samples before its event, %d labelled after; want both", before, labelled)
	}
	body := metricsText(t, a)
	for _, want := range []string{"stackstream_agent_k8s_pods 2", "stackstream_agent_k8s_events_total 1", "stackstream_agent_k8s_relists_total 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// metricsText renders the agent's registry as /metrics does.
func metricsText(t *testing.T, a *running) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestConfigCommAndKubernetes: a bad comm regexp or Kubernetes mode stops
// start-up in Validate, naming the variable, before the agent reaches Kafka.
func TestConfigCommAndKubernetes(t *testing.T) {
	base := Config{Frequency: 19, Interval: 10 * time.Second, CountsMapSize: 64, StacksMapSize: 64, BufferRecords: 1, BufferBytes: 1 << 20,
		HeapMaxCompressedBytes: 1024, HeapMaxBytes: 1024, HeapMaxEntries: 16, HeapTimeout: time.Second, FileTimeout: time.Second, DebuginfoHold: time.Second}
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Comm = "^(java|python" }, "STACKSTREAM_AGENT_COMM"},
		{func(c *Config) { c.Kubernetes = "maybe" }, "STACKSTREAM_AGENT_KUBERNETES"},
		{func(c *Config) { c.Comm = "^(java|python)$"; c.Kubernetes = "" }, ""},
	} {
		c := base
		tc.set(&c)
		err := c.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%q, %q) = %v, want an error naming %q", c.Comm, c.Kubernetes, err, tc.want)
		}
	}
	if _, ok, err := (Config{Kubernetes: "on"}).kubernetes(); ok || err == nil || !strings.Contains(err.Error(), "STACKSTREAM_AGENT_KUBERNETES_API") {
		t.Errorf("KUBERNETES=on without an API server: %v, %v", ok, err)
	}
}

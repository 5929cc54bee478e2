package k8s

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	idA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	idB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	idC = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
)

// podObject is a v1.Pod as the API server writes it (fields the cache does
// not read included, as a real answer has them).
func podObject(uid, name, ns, version, ownerKind, ownerName, hash string, containers map[string]string) map[string]any {
	meta := map[string]any{
		"uid": uid, "name": name, "namespace": ns, "resourceVersion": version,
		"creationTimestamp": "2026-12-01T00:00:00Z",
		"labels":            map[string]string{"app": name},
	}
	if hash != "" {
		meta["labels"] = map[string]string{"app": name, "pod-template-hash": hash}
	}
	if ownerKind != "" {
		meta["ownerReferences"] = []map[string]any{
			{"apiVersion": "apps/v1", "kind": "Node", "name": "not-a-controller", "uid": "x"},
			{"apiVersion": "apps/v1", "kind": ownerKind, "name": ownerName, "uid": "y", "controller": true, "blockOwnerDeletion": true},
		}
	}
	var statuses []map[string]any
	for id, cname := range containers {
		statuses = append(statuses, map[string]any{"name": cname, "containerID": "containerd://" + id, "ready": true, "image": "example/app:1"})
	}
	return map[string]any{
		"apiVersion": "v1", "kind": "Pod", "metadata": meta,
		"spec":   map[string]any{"nodeName": "node-1", "containers": []map[string]any{{"name": "app"}}},
		"status": map[string]any{"phase": "Running", "containerStatuses": statuses},
	}
}

// apiServer fakes the API server's answers to GET /api/v1/pods: a paginated
// list, then watches that send what the test queues.
type apiServer struct {
	t       *testing.T
	mu      sync.Mutex
	pages   [][]map[string]any
	version string
	watches chan []string // each watch request sends one batch of raw event lines, then ends
	lists   int
	token   string
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/pods" {
		http.NotFound(w, r)
		return
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+s.token {
		http.Error(w, `{"kind":"Status","code":401}`, http.StatusUnauthorized)
		return
	}
	if got := r.URL.Query().Get("fieldSelector"); got != "spec.nodeName=node-1" {
		s.t.Errorf("fieldSelector = %q", got)
	}
	if r.URL.Query().Get("watch") == "1" {
		select {
		case lines := <-s.watches:
			w.Header().Set("Content-Type", "application/json")
			for _, l := range lines {
				io.WriteString(w, l+"\n")
				w.(http.Flusher).Flush()
			}
		case <-r.Context().Done():
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	page := 0
	if c := r.URL.Query().Get("continue"); c != "" {
		fmt.Sscanf(c, "page-%d", &page)
	} else {
		s.lists++
	}
	meta := map[string]any{"resourceVersion": s.version}
	if page+1 < len(s.pages) {
		meta["continue"] = fmt.Sprintf("page-%d", page+1)
	}
	json.NewEncoder(w).Encode(map[string]any{"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": s.pages[page]})
}

func event(typ string, obj any) string {
	b, _ := json.Marshal(map[string]any{"type": typ, "object": obj})
	return string(b)
}

func startCache(t *testing.T, s *apiServer) (*Cache, context.CancelFunc) {
	t.Helper()
	srv := httptest.NewTLSServer(s)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(s.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Server: srv.URL, TokenFile: tok, CAFile: ca, NodeName: "node-1"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return c, cancel
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCacheListWatchRelist(t *testing.T) {
	s := &apiServer{t: t, token: "s3cret", version: "100", watches: make(chan []string, 4)}
	s.pages = [][]map[string]any{
		{podObject("uid-web", "web-7d9f8b6c5-x2x9q", "shop", "90", "ReplicaSet", "web-7d9f8b6c5", "7d9f8b6c5", map[string]string{idA: "server", idB: "sidecar"})},
		{podObject("uid-db", "db-0", "shop", "95", "StatefulSet", "db", "", map[string]string{idC: "postgres"})},
	}
	c, _ := startCache(t, s)
	waitFor(t, "the list", func() bool { return c.Len() == 2 })

	if m, ok := c.Lookup("uid-web", idB); !ok || m != (Meta{Pod: "web-7d9f8b6c5-x2x9q", Namespace: "shop", Container: "sidecar", Workload: "web"}) {
		t.Errorf("web pod = %+v, %v", m, ok)
	}
	if m, _ := c.Lookup("uid-db", idC); m != (Meta{Pod: "db-0", Namespace: "shop", Container: "postgres", Workload: "db"}) {
		t.Errorf("db pod = %+v", m)
	}
	if _, ok := c.Lookup("uid-unknown", idA); ok {
		t.Error("unknown pod found")
	}

	// A watch: a CronJob's pod added, the db pod deleted, a bookmark, then
	// the server ends the watch; the next one says the version expired.
	s.watches <- []string{
		event("ADDED", podObject("uid-job", "backup-29012345-abcde", "ops", "101", "Job", "backup-29012345", "", map[string]string{idA: "backup"})),
		event("DELETED", podObject("uid-db", "db-0", "shop", "102", "StatefulSet", "db", "", nil)),
		event("BOOKMARK", map[string]any{"kind": "Pod", "metadata": map[string]any{"resourceVersion": "103"}}),
	}
	waitFor(t, "the watch events", func() bool { return c.Events.Load() == 2 })
	if m, _ := c.Lookup("uid-job", idA); m.Workload != "backup" || m.Container != "backup" || m.Namespace != "ops" {
		t.Errorf("cron job pod = %+v", m)
	}
	if _, ok := c.Lookup("uid-db", idC); ok {
		t.Error("deleted pod still found")
	}

	s.mu.Lock()
	s.pages = [][]map[string]any{{podObject("uid-new", "solo", "default", "200", "", "", "", map[string]string{idB: "solo"})}}
	s.version = "200"
	s.mu.Unlock()
	s.watches <- []string{event("ERROR", map[string]any{"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"})}
	waitFor(t, "the relist", func() bool { return c.Relists.Load() == 2 })
	if m, ok := c.Lookup("uid-new", idB); !ok || m != (Meta{Pod: "solo", Namespace: "default", Container: "solo"}) {
		t.Errorf("bare pod after relist = %+v, %v", m, ok)
	}
	if c.Len() != 1 {
		t.Errorf("after relist %d pods, want 1", c.Len())
	}
}

func TestCacheHostileAnswers(t *testing.T) {
	s := &apiServer{t: t, token: "tok", version: "1", watches: make(chan []string, 4)}
	s.pages = [][]map[string]any{{podObject("uid-1", "p", "n", "1", "", "", "", map[string]string{idA: "c"})}}
	c, _ := startCache(t, s)
	waitFor(t, "the list", func() bool { return c.Len() == 1 })

	// An event larger than the bound, and one that is not JSON: each fails
	// its watch (counted), and the cache keeps what it had.
	huge := event("ADDED", podObject("uid-2", strings.Repeat("x", maxEventBytes), "n", "2", "", "", "", nil))
	s.watches <- []string{huge}
	waitFor(t, "the oversized event's error", func() bool { return c.Errors.Load() >= 1 })
	s.watches <- []string{`{"type":"ADDED","object":{`}
	waitFor(t, "the broken event's error", func() bool { return c.Errors.Load() >= 2 })
	if _, ok := c.Lookup("uid-2", ""); ok {
		t.Error("oversized pod kept")
	}
	if _, ok := c.Lookup("uid-1", idA); !ok {
		t.Error("known pod lost after bad events")
	}
	// Container IDs that are not 64 hex digits are not kept; names are bounded.
	p, ok := fromJSON(&podJSON{})
	if ok || p != nil {
		t.Error("pod without UID accepted")
	}
	var obj podJSON
	obj.Metadata.UID = "u"
	obj.Metadata.Name = strings.Repeat("n", 1000) + "\xff"
	obj.Status.ContainerStatuses = []containerStatus{{Name: "a", ContainerID: "docker://../../etc"}, {Name: "b", ContainerID: "containerd://" + idC}}
	p, _ = fromJSON(&obj)
	if len(p.name) > maxNameBytes || len(p.containers) != 1 || p.containers[idC] != "b" {
		t.Errorf("bounded pod = name %d bytes, containers %v", len(p.name), p.containers)
	}
}

func TestCacheRejectsBadToken(t *testing.T) {
	s := &apiServer{t: t, token: "right", version: "1", watches: make(chan []string)}
	s.pages = [][]map[string]any{{}}
	srv := httptest.NewTLSServer(s)
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("wrong"), 0o600)
	c, err := New(Config{Server: srv.URL, TokenFile: tok, NodeName: "node-1"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	c.client = srv.Client()
	_, err = c.list(context.Background())
	if err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("list with a wrong token: %v, want HTTP 401", err)
	}
}

func TestNewValidates(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, cfg := range []Config{
		{Server: "", NodeName: "n"},
		{Server: "ftp://x", NodeName: "n"},
		{Server: "https://127.0.0.1:6443"},
		{Server: "https://127.0.0.1:6443", NodeName: "n", CAFile: "/nonexistent/ca.crt"},
	} {
		if _, err := New(cfg, log); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func TestWorkloadOf(t *testing.T) {
	for _, c := range []struct{ kind, name, hash, want string }{
		{"ReplicaSet", "api-5c9d8f7b6", "5c9d8f7b6", "api"},
		{"ReplicaSet", "handmade", "", "handmade"},
		{"Job", "nightly-29012345", "", "nightly"},
		{"Job", "migrate-1", "", "migrate-1"},
		{"DaemonSet", "fluentbit", "", "fluentbit"},
		{"StatefulSet", "kafka", "", "kafka"},
	} {
		if got := workloadOf(c.kind, c.name, c.hash); got != c.want {
			t.Errorf("workloadOf(%s %s) = %q, want %q", c.kind, c.name, got, c.want)
		}
	}
}

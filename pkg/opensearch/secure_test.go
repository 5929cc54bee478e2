package opensearch

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
)

// The tests here run against the OpenSearch node with the security plugin of
// deploy/local/secure-up.sh (make up-secure): HTTPS with the generated CA,
// basic auth, and the indexer user whose role stackstream_indexer may only
// touch indices under its prefix.

func secureClient(t *testing.T, e testenv.SecureEnv, user, password string) *opensearchapi.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := NewClient(ctx, Config{URLs: []string{e.OpenSearchURL}, Username: user, Password: password, TLSCAFile: e.CAFile, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	return cl
}

// TestSecureIndexer: as the indexer user, over TLS, the indexer's start-up
// (templates, twice) and writes (bulk into the stacks index and a daily
// samples index) work, and so do reading and deleting its own indices; the
// role refuses another prefix's indices and the security API.
func TestSecureIndexer(t *testing.T) {
	e := testenv.Secure(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := secureClient(t, e, e.AdminUsername, e.AdminPassword)
	ix := secureClient(t, e, e.IndexerUsername, e.IndexerPassword)
	prefix := testenv.Name(t, e.IndexerPrefix) + "-"
	other := testenv.Name(t, "other-")
	t.Cleanup(func() {
		RemovePrefix(context.Background(), admin, prefix)
		Raw(context.Background(), admin, http.MethodDelete, "/"+other, nil)
	})

	for i, want := range []string{"created", "unchanged"} {
		res, err := ApplyTemplates(ctx, ix, prefix, indices.Settings{Replicas: 0, RefreshInterval: "1s"})
		if err != nil {
			t.Fatalf("apply templates as indexer (run %d): %v", i+1, err)
		}
		for _, r := range res {
			if r.Action != want {
				t.Errorf("run %d: template %s %s, want %s", i+1, r.Name, r.Action, want)
			}
		}
	}

	names := indices.Names{Prefix: prefix}
	now := time.Now().UTC()
	stack := indices.StackDoc{Timestamp: now, Frames: []indices.Frame{{Function: "main"}}, Functions: []string{"main"}, Leaf: "main", Depth: 1}
	sample := indices.SampleDoc{Timestamp: now, Type: "cpu", Host: "h", Service: "s", Value: 7, Count: 1}
	var body bytes.Buffer
	for _, d := range []struct {
		index, id string
		doc       any
	}{{names.Stacks(), "s1", stack}, {names.Samples(now), "p1", sample}} {
		meta, _ := json.Marshal(map[string]any{"create": map[string]string{"_index": d.index, "_id": d.id}})
		doc, err := json.Marshal(d.doc)
		if err != nil {
			t.Fatal(err)
		}
		body.Write(meta)
		body.WriteByte('\n')
		body.Write(doc)
		body.WriteByte('\n')
	}
	status, resp, err := Raw(ctx, ix, http.MethodPost, "/_bulk?refresh=true", body.Bytes())
	if err != nil || status != http.StatusOK || !bytes.Contains(resp, []byte(`"errors":false`)) {
		t.Fatalf("bulk as indexer: %d %v %.500s", status, err, resp)
	}
	status, resp, err = Raw(ctx, ix, http.MethodGet, "/"+prefix+"*/_count", nil)
	if err != nil || status != http.StatusOK || !bytes.Contains(resp, []byte(`"count":2`)) {
		t.Fatalf("count as indexer: %d %v %s", status, err, resp)
	}
	// Retention: the indexer lists and deletes its own expired daily indices.
	status, resp, err = Raw(ctx, ix, http.MethodGet, "/_cat/indices/"+names.SamplesPattern()+"?format=json&h=index", nil)
	if err != nil || status != http.StatusOK || !bytes.Contains(resp, []byte(names.Samples(now))) {
		t.Fatalf("list own indices as indexer: %d %v %s", status, err, resp)
	}
	if status, resp, err = Raw(ctx, ix, http.MethodDelete, "/"+names.Samples(now), nil); err != nil || status != http.StatusOK {
		t.Fatalf("delete own index as indexer: %d %v %s", status, err, resp)
	}

	// What the role must not allow.
	if status, resp, err := Raw(ctx, admin, http.MethodPut, "/"+other, nil); err != nil || status != http.StatusOK {
		t.Fatalf("create %s as admin: %d %v %s", other, status, err, resp)
	}
	for _, c := range []struct {
		name, method, path string
		body               []byte
	}{
		{"delete another prefix's index", http.MethodDelete, "/" + other, nil},
		{"write into another prefix's index", http.MethodPut, "/" + other + "/_doc/1", []byte(`{"a":1}`)},
		{"read another prefix's index", http.MethodGet, "/" + other + "/_search", nil},
		{"create an index outside the prefix", http.MethodPut, "/" + other + "-new", nil},
		{"read the users", http.MethodGet, "/_plugins/_security/api/internalusers", nil},
		{"change cluster settings", http.MethodPut, "/_cluster/settings", []byte(`{"persistent":{"cluster.max_shards_per_node":5000}}`)},
	} {
		status, resp, err := Raw(ctx, ix, c.method, c.path, c.body)
		if err != nil || status != http.StatusForbidden {
			t.Errorf("%s as indexer: HTTP %d %v %.300s, want 403", c.name, status, err, resp)
		}
	}
	if status, _, _ := Raw(ctx, admin, http.MethodHead, "/"+other, nil); status != http.StatusOK {
		t.Errorf("%s is gone after the indexer's refused delete (HEAD: %d)", other, status)
	}
}

// TestSecureRejected: a wrong password, a CA that did not sign the node's
// certificate, and plain http:// to the TLS port each stop NewClient with one
// line naming what to fix, never the password or a URL's userinfo.
func TestSecureRejected(t *testing.T) {
	e := testenv.Secure(t)
	host := strings.TrimPrefix(e.OpenSearchURL, "https://")
	wrong := "wrong-" + e.IndexerPassword[:8]
	withUserinfo := "https://" + url.UserPassword(e.IndexerUsername, wrong).String() + "@" + host
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"wrong password", Config{URLs: []string{e.OpenSearchURL}, Username: e.IndexerUsername, Password: wrong, TLSCAFile: e.CAFile},
			[]string{"HTTP 401", `user "` + e.IndexerUsername + `"`, "STACKSTREAM_OPENSEARCH_PASSWORD"}},
		{"wrong password in the url", Config{URLs: []string{withUserinfo}, TLSCAFile: e.CAFile},
			[]string{"HTTP 401", "https://***@" + host, `user "` + e.IndexerUsername + `"`}},
		{"untrusted node certificate", Config{URLs: []string{e.OpenSearchURL}, Username: e.IndexerUsername, Password: e.IndexerPassword, TLSCAFile: e.OtherCAFile},
			[]string{"TLS:", "not trusted", "certificate signed by unknown authority", "STACKSTREAM_OPENSEARCH_TLS_CA_FILE"}},
		{"untrusted node certificate, system roots", Config{URLs: []string{withUserinfo}},
			[]string{"TLS:", "not trusted", "STACKSTREAM_OPENSEARCH_TLS_CA_FILE", "https://***@" + host}},
		{"http to the https port", Config{URLs: []string{"http://" + host}, Username: e.IndexerUsername, Password: e.IndexerPassword},
			[]string{"STACKSTREAM_OPENSEARCH_URL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tt.cfg.Timeout = 10 * time.Second
			_, err := NewClient(ctx, tt.cfg)
			if err == nil {
				t.Fatal("NewClient succeeded")
			}
			msg := err.Error()
			t.Logf("error: %s", msg)
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q", w)
				}
			}
			for _, secret := range []string{wrong, e.IndexerPassword, e.IndexerUsername + ":"} {
				if strings.Contains(msg, secret) {
					t.Errorf("error shows %q", secret)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines")
			}
		})
	}
}

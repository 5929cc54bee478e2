package api_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// TestHeadCacheReadsHeadsOnce: a fleet-wide range read from the fleet's
// hour heads, asked again of the same service, reads no head from
// OpenSearch (the heads it decoded are kept by version) and answers the
// same; a head rewritten under the same _id (a new version: here a
// smaller head of the same trees, which proves fewer max_nodes) is read
// again, alone, and answers as a service that never saw the old version
// does. Every answer equals the brute-force sums. OpenSearch is reached
// through a proxy that counts the trees its answers carry.
func TestHeadCacheReadsHeadsOnce(t *testing.T) {
	cl, names := querytest.Setup(t)
	day := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	hosts := []string{"h-0", "h-1", "h-2", "h-3"}
	all := newBrute()
	headDocs := headedHours(t, cl, names, day, hosts, all) // 05:00-11:00, heads of 12 nodes
	querytest.Index(t, cl, names, headDocs)

	target, err := url.Parse(testenv.OpenSearchURL(t))
	if err != nil {
		t.Fatal(err)
	}
	var trees atomic.Int64 // trees (head or tree documents' "tree") in OpenSearch's answers
	proxy := httputil.NewSingleHostReverseProxy(target)
	direct := proxy.Director
	proxy.Director = func(r *http.Request) {
		direct(r)
		r.Header.Del("Accept-Encoding") // answers read as sent: the transport inflates them
	}
	proxy.ModifyResponse = func(r *http.Response) error {
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return err
		}
		trees.Add(int64(bytes.Count(b, []byte(`"tree":"`))))
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		r.Header.Del("Content-Length")
		return nil
	}
	ps := httptest.NewServer(proxy)
	t.Cleanup(ps.Close)
	pcl, err := opensearch.NewClient(t.Context(), opensearch.Config{URLs: []string{ps.URL}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	at := day.Add(12 * time.Hour)
	newServer := func() string {
		srv := httptest.NewServer(api.New(pcl, names, api.Options{Now: func() time.Time { return at }, Timeout: time.Minute}, slog.New(slog.NewTextHandler(io.Discard, nil))))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	params := func(maxNodes int) url.Values {
		return url.Values{"from": {day.Add(5 * time.Hour).Format(time.RFC3339)}, "to": {day.Add(11 * time.Hour).Format(time.RFC3339)},
			"max_nodes": {fmt.Sprint(maxNodes)}}
	}
	flame := func(base string, maxNodes int) api.FlamegraphResponse {
		t.Helper()
		var f api.FlamegraphResponse
		get(t, base, "/api/v1/flamegraph", params(maxNodes), &f)
		if f.Truncated || f.Total != all.total {
			t.Fatalf("max_nodes %d: source %s truncated %v total %d, want %d", maxNodes, f.Source, f.Truncated, f.Total, all.total)
		}
		if shown, other := checkFlame(t, all, f.Root, ""); shown != min(maxNodes, len(all.nodes)) || f.Folded != other {
			t.Fatalf("max_nodes %d: %d nodes shown, %d [other], folded %d", maxNodes, shown, other, f.Folded)
		}
		return f
	}
	// ask answers maxNodes and counts the trees OpenSearch sent for it.
	ask := func(base string, maxNodes int) (api.FlamegraphResponse, int64) {
		t.Helper()
		before := trees.Load()
		f := flame(base, maxNodes)
		return f, trees.Load() - before
	}
	same := func(what string, got, want api.FlamegraphResponse) {
		t.Helper()
		if got.Source != want.Source || got.Folded != want.Folded || !reflect.DeepEqual(got.Root, want.Root) {
			t.Fatalf("%s: source %s folded %d, want %s %d; the flame graphs differ", what, got.Source, got.Folded, want.Source, want.Folded)
		}
	}

	base := newServer()
	const maxNodes = 3
	first, n := ask(base, maxNodes)
	if first.Source != "fleet_hour_heads" || n != int64(len(headDocs)) {
		t.Fatalf("first request: source %s, %d trees read, want fleet_hour_heads from %d heads", first.Source, n, len(headDocs))
	}
	again, n := ask(base, maxNodes)
	if n != 0 {
		t.Fatalf("asked again: %d trees read from OpenSearch, want 0 (the heads decoded the first time)", n)
	}
	same("asked again", again, first)

	// The head of 07:00 rewritten with 2 nodes of the same trees (same
	// sources, as headedHours builds them): fresh, but a new version,
	// which proves less.
	d := headDocs[2].Body.(indices.RollupDoc)
	if hr := d.Timestamp.Sub(day); hr != 7*time.Hour {
		t.Fatalf("head %s, want 07:00", hr)
	}
	var fleet indices.TreeBuilder
	for _, h := range hosts {
		for i := 0; i < 15; i++ {
			path, v := headStack(h, 7*60, i)
			fleet.Add(treeFrames(path), 60*v)
		}
	}
	if fleet.Total() != d.Value {
		t.Fatalf("rebuilt hour total %d, want %d", fleet.Total(), d.Value)
	}
	d.Tree = fleet.EncodeHead(2)
	h := querytest.Rollup(names, d)
	querytest.Index(t, cl, names, []querytest.Doc{h})
	changed := 0
	for _, max := range []int{1, 2, 3, 4, 6, 8} {
		got, n := ask(base, max)
		want, _ := ask(newServer(), max) // a service that never saw the old head
		same(fmt.Sprintf("max_nodes %d after the head's rewrite", max), got, want)
		if max == 1 && (got.Source != "fleet_hour_heads" || n != 1) {
			t.Fatalf("max_nodes 1 after the head's rewrite: source %s, %d trees read, want the rewritten head alone", got.Source, n)
		}
		if max == maxNodes && got.Source != first.Source {
			changed++
		}
	}
	if changed == 0 {
		t.Fatalf("the smaller head proves max_nodes %d as the old one did: the test does not tell the versions apart", maxNodes)
	}
}

package opensearch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

type scrollHit struct {
	ID     string `json:"_id"`
	Source struct {
		N int `json:"n"`
	} `json:"_source"`
}

// TestScrollEach reads 25 documents 10 a page from the real node: every
// document once, in three pages, and the scroll context freed at the end,
// when use fails part-way, and when the search itself is refused.
func TestScrollEach(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, prefix := testNode(ctx, t)
	index := prefix + "scroll"
	var b strings.Builder
	for i := range 25 {
		fmt.Fprintf(&b, "{\"index\":{\"_index\":%q,\"_id\":\"d%d\"}}\n{\"n\":%d,\"pad\":\"x\"}\n", index, i, i)
	}
	if status, body, err := Raw(ctx, cl, http.MethodPost, "/_bulk?refresh=true", []byte(b.String())); err != nil || status != http.StatusOK || strings.Contains(string(body), `"errors":true`) {
		t.Fatalf("bulk: %d %v %.300s", status, err, body)
	}
	openContexts := func() int {
		t.Helper()
		status, body, err := Raw(ctx, cl, http.MethodGet, "/"+index+"/_stats/search", nil)
		if err != nil || status != http.StatusOK {
			t.Fatalf("stats: %d %v %.300s", status, err, body)
		}
		var st struct {
			All struct {
				Total struct {
					Search struct {
						OpenContexts int `json:"open_contexts"`
					} `json:"search"`
				} `json:"total"`
			} `json:"_all"`
		}
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatal(err)
		}
		return st.All.Total.Search.OpenContexts
	}
	// contextsFreed waits for the node to count no open scroll context: a
	// context cleared while a page read on it was being cancelled is
	// counted until that read lets go of it, which may be a moment after
	// the clear answered. A context left open would stay for its keep-alive
	// (a minute), well past this wait.
	contextsFreed := func(after string) {
		t.Helper()
		n := openContexts()
		for deadline := time.Now().Add(10 * time.Second); n != 0 && time.Now().Before(deadline); n = openContexts() {
			time.Sleep(100 * time.Millisecond)
		}
		if n != 0 {
			t.Errorf("%d scroll contexts open 10 s after %s, want 0", n, after)
		}
	}
	s := Scroll{
		Do:         RawDo(cl),
		Path:       "/" + index + "/_search?ignore_unavailable=true",
		Body:       []byte(`{"size":10,"sort":["_doc"],"query":{"match_all":{}}}`),
		Keep:       "1m",
		FilterPath: "_scroll_id,timed_out,_shards.failed,hits.total,hits.hits._id,hits.hits._source.n",
		Size:       10,
	}

	seen := map[int]int{}
	var sizes []int
	err := ScrollEach(ctx, s, func(p *ScrollPage[scrollHit]) error {
		sizes = append(sizes, len(p.Hits.Hits))
		for _, h := range p.Hits.Hits {
			if h.ID != fmt.Sprintf("d%d", h.Source.N) {
				t.Errorf("hit %s has n %d", h.ID, h.Source.N)
			}
			seen[h.Source.N]++
		}
		if p.Hits.Total.Value != 25 {
			t.Errorf("total %d, want 25", p.Hits.Total.Value)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(sizes) != "[10 10 5]" || len(seen) != 25 {
		t.Fatalf("pages %v, %d distinct documents, want [10 10 5] and 25", sizes, len(seen))
	}
	for n, c := range seen {
		if c != 1 {
			t.Errorf("document %d read %d times", n, c)
		}
	}
	contextsFreed("the read")

	stop := errors.New("stop")
	pages := 0
	err = ScrollEach(ctx, s, func(p *ScrollPage[scrollHit]) error {
		pages++
		return stop
	})
	if !errors.Is(err, stop) || pages != 1 {
		t.Fatalf("use failing: err %v after %d pages, want stop after 1", err, pages)
	}
	contextsFreed("use failed")

	bad := s
	bad.Body = []byte(`{"size":10,"query":{"no_such_query":{}}}`)
	err = ScrollEach(ctx, bad, func(p *ScrollPage[scrollHit]) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "HTTP 400") {
		t.Fatalf("a refused search: err %v, want HTTP 400", err)
	}
}

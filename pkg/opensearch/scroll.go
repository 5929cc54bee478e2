package opensearch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
)

var (
	// ErrTimedOut is a page OpenSearch cut at the search's timeout: its
	// hits are not all there.
	ErrTimedOut = errors.New("the search timed out")
	// ErrShardsFailed is a page some shards did not answer.
	ErrShardsFailed = errors.New("shards failed")
)

// Do performs a request with a JSON body (nil for none) and returns the
// body of a 2xx answer, else an error.
type Do func(ctx context.Context, method, path string, body []byte) ([]byte, error)

// RawDo is Do over Raw: any answer but a 2xx is an error naming its status.
func RawDo(cl *opensearchapi.Client) Do {
	return func(ctx context.Context, method, path string, body []byte) ([]byte, error) {
		status, resp, err := Raw(ctx, cl, method, path, body)
		if err != nil {
			return nil, err
		}
		if status/100 != 2 {
			return nil, fmt.Errorf("HTTP %d: %s", status, truncate(resp, 300))
		}
		return resp, nil
	}
}

// Scroll is a search read a page at a time, the scroll context kept
// between pages: for reads of more documents than one answer should hold
// (trees of megabytes each, a whole index copied).
type Scroll struct {
	Do Do
	// Path is the first page's: "/<indices>/_search", with query
	// parameters (ignore_unavailable=…) but no scroll=.
	Path string
	Body []byte
	// Keep is how long the scroll context waits for the next page ("1m").
	Keep string
	// FilterPath, when set, is every page's filter_path: it must keep
	// _scroll_id, timed_out and _shards.failed besides what the hits need.
	FilterPath string
	// Size is the page size Body asks for: a page with fewer hits is the
	// last (0: read until a page comes back empty).
	Size int
}

// ScrollPage is a page of a Scroll, its hits decoded as H.
type ScrollPage[H any] struct {
	ScrollID string `json:"_scroll_id"`
	TimedOut bool   `json:"timed_out"`
	Shards   struct {
		Failed int `json:"failed"`
	} `json:"_shards"`
	Hits struct {
		Total struct {
			Value int64 `json:"value"`
		} `json:"total"`
		Hits []H `json:"hits"`
	} `json:"hits"`
}

// ScrollEach hands every page of s to use, in order, and returns use's
// first error or the read's. The next page is read while use handles the
// last one. The scroll context is freed before it returns, whether the
// read ended, failed or ctx was cancelled.
func ScrollEach[H any](ctx context.Context, s Scroll, use func(*ScrollPage[H]) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := make(chan *ScrollPage[H], 1)
	errc := make(chan error, 1)
	go func() {
		defer close(pages)
		errc <- scrollPages(ctx, s, pages)
	}()
	for p := range pages {
		if err := use(p); err != nil {
			cancel()
			for range pages {
			}
			return err
		}
	}
	return <-errc
}

// scrollPages reads the pages of s into pages until the last one, and
// frees the scroll context it opened.
func scrollPages[H any](ctx context.Context, s Scroll, pages chan<- *ScrollPage[H]) error {
	var id string
	defer func() {
		if id != "" {
			s.freeScroll(ctx, id)
		}
	}()
	path, body := s.first(), s.Body
	method := http.MethodPost
	for {
		resp, err := s.Do(ctx, method, path, body)
		if err != nil {
			return err
		}
		p := &ScrollPage[H]{}
		if err := json.Unmarshal(resp, p); err != nil {
			return fmt.Errorf("decode a scroll page of %s: %w", s.Path, err)
		}
		if p.ScrollID != "" {
			id = p.ScrollID
		}
		switch {
		case p.TimedOut:
			return ErrTimedOut
		case p.Shards.Failed > 0:
			return fmt.Errorf("%d %w", p.Shards.Failed, ErrShardsFailed)
		case len(p.Hits.Hits) == 0:
			return nil
		}
		select {
		case pages <- p:
		case <-ctx.Done():
			return ctx.Err()
		}
		if len(p.Hits.Hits) < s.Size {
			return nil
		}
		path = "/_search/scroll"
		if s.FilterPath != "" {
			path += "?filter_path=" + s.FilterPath
		}
		if body, err = json.Marshal(map[string]string{"scroll": s.Keep, "scroll_id": id}); err != nil {
			return err
		}
	}
}

// freeScroll frees a scroll context now rather than at its keep-alive.
func (s Scroll) freeScroll(ctx context.Context, id string) {
	b, err := json.Marshal(map[string]any{"scroll_id": []string{id}})
	if err != nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = s.Do(dctx, http.MethodDelete, "/_search/scroll", b)
}

// first is the first page's path: Path with the scroll's parameters.
func (s Scroll) first() string {
	sep := "?"
	if strings.Contains(s.Path, "?") {
		sep = "&"
	}
	p := s.Path + sep + "scroll=" + s.Keep
	if s.FilterPath != "" {
		p += "&filter_path=" + s.FilterPath
	}
	return p
}

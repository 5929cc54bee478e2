// Package bulk writes documents to OpenSearch with the _bulk API: requests
// bounded by bytes, transient failures retried with backoff until they succeed
// or the context ends, permanent per-item rejections handed back to the caller
// (for the DLQ). Consumers commit their offsets only after Write returned nil.
package bulk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
)

// Item is one document to write.
type Item struct {
	Index string
	ID    string
	// Create writes with op_type create: a 409 (the ID exists) counts as
	// already stored, so immutable documents are written once.
	Create bool
	Doc    []byte // JSON
}

// Rejected is an item OpenSearch refused for good (a mapping error, another
// 4xx): retrying it cannot help, so it belongs in the DLQ.
type Rejected struct {
	Item   Item
	Status int
	Reason string
}

// Options tune a Writer; the zero value works.
type Options struct {
	MaxBytes   int           // per bulk request body; default DefaultMaxBytes
	MaxRetries int           // retries of one request; 0 retries transient failures until ctx ends
	Backoff    time.Duration // first retry delay, doubled up to MaxBackoff; default 100ms
	MaxBackoff time.Duration // default 10s
	Metrics    *Metrics      // optional
}

// Defaults of Options.
const (
	DefaultMaxBytes   = 8 << 20
	DefaultBackoff    = 100 * time.Millisecond
	DefaultMaxBackoff = 10 * time.Second
)

// ErrRetriesExhausted is returned when MaxRetries > 0 and a transient failure
// outlived it; the items not yet stored must be written again.
var ErrRetriesExhausted = errors.New("bulk retries exhausted")

// Writer sends items with the _bulk API. It is safe for concurrent use.
type Writer struct {
	cl   *opensearchapi.Client
	opts Options
	m    *Metrics
}

// New returns a Writer over cl.
func New(cl *opensearchapi.Client, opts Options) *Writer {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Backoff <= 0 {
		opts.Backoff = DefaultBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	m := opts.Metrics
	if m == nil {
		m = nopMetrics()
	}
	return &Writer{cl: cl, opts: opts, m: m}
}

// Write sends all items in bulk requests bounded by MaxBytes. Transient
// failures (429, 5xx, connection errors, timeouts) are retried with exponential
// backoff until they succeed or ctx ends (then it returns ctx.Err()). Items
// rejected permanently (mapping errors, other 4xx) are returned, not retried.
// Returns nil error only when every item is stored or rejected.
func (w *Writer) Write(ctx context.Context, items []Item) ([]Rejected, error) {
	var rejected []Rejected
	var body bytes.Buffer
	pending := make([]int, 0, len(items))
	for start := 0; start < len(items); {
		body.Reset()
		pending = pending[:0]
		end := start
		for end < len(items) {
			before := body.Len()
			appendItem(&body, &items[end])
			// A single item larger than MaxBytes still goes, alone.
			if body.Len() > w.opts.MaxBytes && end > start {
				body.Truncate(before)
				break
			}
			pending = append(pending, end)
			end++
		}
		rej, err := w.send(ctx, items, pending, body.Bytes())
		rejected = append(rejected, rej...)
		if err != nil {
			return rejected, err
		}
		start = end
	}
	return rejected, nil
}

// send writes the items at idx (already encoded in body) until each is stored
// or rejected, re-sending only the items that failed transiently.
func (w *Writer) send(ctx context.Context, items []Item, idx []int, body []byte) ([]Rejected, error) {
	var rejected []Rejected
	backoff := w.opts.Backoff
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if w.opts.MaxRetries > 0 && attempt > w.opts.MaxRetries {
				return rejected, fmt.Errorf("write %d documents: %w", len(idx), ErrRetriesExhausted)
			}
			w.m.Retries.Inc()
			// Full jitter keeps several writers from retrying in step.
			d := backoff/2 + rand.N(backoff/2+1)
			select {
			case <-ctx.Done():
				return rejected, ctx.Err()
			case <-time.After(d):
			}
			backoff = min(2*backoff, w.opts.MaxBackoff)
			var b bytes.Buffer
			for _, i := range idx {
				appendItem(&b, &items[i])
			}
			body = b.Bytes()
		}
		if err := ctx.Err(); err != nil {
			return rejected, err
		}
		results, status, err := w.do(ctx, body, len(idx))
		if err != nil {
			if ctx.Err() != nil {
				return rejected, ctx.Err()
			}
			w.m.Failures.WithLabelValues(failureReason(status)).Inc()
			continue
		}
		var retry []int
		for k, i := range idx {
			r := results[k]
			switch {
			case r.Status >= 200 && r.Status < 300:
				w.m.Docs.WithLabelValues("stored").Inc()
			case r.Status == http.StatusConflict && items[i].Create:
				w.m.Docs.WithLabelValues("existed").Inc()
			case transient(r.Status):
				retry = append(retry, i)
			default:
				w.m.Docs.WithLabelValues("rejected").Inc()
				rejected = append(rejected, Rejected{Item: items[i], Status: r.Status, Reason: r.reason()})
			}
		}
		if len(retry) == 0 {
			return rejected, nil
		}
		w.m.Failures.WithLabelValues("item_transient").Inc()
		idx = retry
	}
}

// transient reports whether an item status may succeed when sent again.
func transient(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

func failureReason(status int) string {
	if status == 0 {
		return "connection"
	}
	return "http_" + strconv.Itoa(status)
}

// itemResult is one entry of a bulk response.
type itemResult struct {
	Status int             `json:"status"`
	Error  json.RawMessage `json:"error"`
}

func (r itemResult) reason() string {
	var e struct {
		Type     string `json:"type"`
		Reason   string `json:"reason"`
		CausedBy *struct {
			Type   string `json:"type"`
			Reason string `json:"reason"`
		} `json:"caused_by"`
	}
	if json.Unmarshal(r.Error, &e) != nil || e.Type == "" {
		return string(r.Error)
	}
	s := e.Type + ": " + e.Reason
	if e.CausedBy != nil {
		s += " (" + e.CausedBy.Type + ": " + e.CausedBy.Reason + ")"
	}
	return s
}

// do performs one bulk request of n items. A non-nil error means the whole
// request failed transiently (status 0 for a connection error); per-item
// outcomes are in the results. A request-level permanent error (400) is turned
// into that status for every item so the items are rejected, not retried.
func (w *Writer) do(ctx context.Context, body []byte, n int) ([]itemResult, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "/_bulk", bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header = http.Header{"Content-Type": {"application/x-ndjson"}}
	start := time.Now()
	resp, err := w.cl.Client.Perform(req)
	if err != nil {
		return nil, 0, fmt.Errorf("bulk request: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	w.m.Latency.Observe(time.Since(start).Seconds())
	w.m.Requests.Inc()
	w.m.Bytes.Add(float64(len(body)))
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("read bulk response: %w", err)
	}
	switch {
	case resp.StatusCode == http.StatusBadRequest:
		// The request as a whole is malformed; retrying it cannot help.
		out := make([]itemResult, n)
		msg, _ := json.Marshal(truncate(raw, 500))
		for k := range out {
			out[k] = itemResult{Status: resp.StatusCode, Error: msg}
		}
		return out, resp.StatusCode, nil
	case resp.StatusCode != http.StatusOK:
		// 429, 5xx, and also 401/403/404 of a misconfigured proxy: an operator
		// can fix those, so waiting beats rejecting every document.
		return nil, resp.StatusCode, fmt.Errorf("bulk request: HTTP %d: %s", resp.StatusCode, truncate(raw, 200))
	}
	if allStored(raw) {
		// The common case: no item failed, so the per-item array (megabytes
		// for a large request) need not be decoded.
		out := make([]itemResult, n)
		for k := range out {
			out[k].Status = http.StatusCreated
		}
		return out, resp.StatusCode, nil
	}
	var parsed struct {
		Errors bool                    `json:"errors"`
		Items  []map[string]itemResult `json:"items"`
	}
	if err := json.Unmarshal(raw, &parsed); err != nil {
		return nil, resp.StatusCode, fmt.Errorf("parse bulk response: %w", err)
	}
	if len(parsed.Items) != n {
		return nil, resp.StatusCode, fmt.Errorf("bulk response has %d items for %d sent", len(parsed.Items), n)
	}
	out := make([]itemResult, n)
	for k, it := range parsed.Items {
		for _, r := range it { // one key: the op type
			out[k] = r
		}
	}
	return out, resp.StatusCode, nil
}

// allStored reports whether a bulk response says no item failed: its
// "errors" flag, written before the items, is false.
func allStored(raw []byte) bool {
	head := raw[:min(len(raw), 256)]
	i := bytes.Index(head, []byte(`"errors":`))
	if i < 0 {
		return false
	}
	rest := bytes.TrimLeft(head[i+len(`"errors":`):], " ")
	return bytes.HasPrefix(rest, []byte("false"))
}

func appendItem(b *bytes.Buffer, it *Item) {
	op := "index"
	if it.Create {
		op = "create"
	}
	b.WriteString(`{"`)
	b.WriteString(op)
	b.WriteString(`":{"_index":`)
	writeJSONString(b, it.Index)
	b.WriteString(`,"_id":`)
	writeJSONString(b, it.ID)
	b.WriteString("}}\n")
	doc := bytes.TrimSpace(it.Doc)
	if bytes.IndexByte(doc, '\n') >= 0 {
		// The bulk format is one line per document: compact pretty JSON.
		before := b.Len()
		if json.Compact(b, doc) != nil {
			b.Truncate(before)
			b.Write(bytes.ReplaceAll(doc, []byte("\n"), []byte(" ")))
		}
	} else {
		b.Write(doc)
	}
	b.WriteByte('\n')
}

func writeJSONString(b *bytes.Buffer, s string) {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			plain = false
			break
		}
	}
	if plain {
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	q, _ := json.Marshal(s)
	b.Write(q)
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

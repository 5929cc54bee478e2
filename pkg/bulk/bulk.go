// Package bulk writes documents to OpenSearch with the _bulk API: requests
// bounded by bytes, transient failures retried with backoff until they succeed
// or the context ends, permanent rejections handed back to the caller (for
// the DLQ). Consumers commit their offsets only after Write returned nil.
//
// What is permanent and what is retried:
//
//   - 2xx per item: stored; 409 on op_type create: stored before.
//   - 429 and 5xx, per item or for the whole request, connection errors and
//     time-outs: retried (only the items concerned), with exponential backoff
//     from Backoff doubling to MaxBackoff, with jitter.
//   - 413 for the whole request (the body exceeds the node's
//     http.max_content_length) and any other whole-request 4xx but 429 and
//     401/403/404/407: the request is split in halves, down to one document,
//     so that only the document at fault is rejected; one document that still
//     gets it is rejected with that status.
//   - 401, 403, 404 and 407 for the whole request: retried. They come from
//     credentials, roles or a proxy an operator can fix, not from the
//     documents, and rejecting would dead-letter everything meanwhile.
//   - Any other per-item status (mapping errors such as
//     mapper_parsing_exception, illegal_argument_exception, other 4xx):
//     rejected.
package bulk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
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
	// Update, when set, makes the item an update action with this body
	// (a script and an upsert document, say) instead of writing Doc;
	// concurrent updates of one document are retried by OpenSearch
	// (retry_on_conflict), then by the writer.
	Update []byte
}

// Rejected is an item OpenSearch refused for good (a mapping error, another
// 4xx, a document too large for the node): retrying it cannot help, so it
// belongs in the DLQ. Index and ID tell the caller which record it came from.
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
// failures are retried with exponential backoff until they succeed or ctx
// ends (then it returns ctx.Err()); permanent ones are returned, not retried
// (see the package comment). Returns nil error only when every item is
// stored or rejected.
func (w *Writer) Write(ctx context.Context, items []Item) ([]Rejected, error) {
	var rejected []Rejected
	var body bytes.Buffer
	for start := 0; start < len(items); {
		body.Reset()
		// Sized once: growing a body of megabytes by doubling copied and
		// zeroed it several times (6% of the indexer's CPU, issue 15).
		body.Grow(bodyEstimate(items[start:], w.opts.MaxBytes))
		var idx []int
		end := start
		for end < len(items) {
			before := body.Len()
			appendItem(&body, &items[end])
			// A single item larger than MaxBytes still goes, alone.
			if body.Len() > w.opts.MaxBytes && end > start {
				body.Truncate(before)
				break
			}
			idx = append(idx, end)
			end++
		}
		rej, err := w.send(ctx, items, idx, body.Bytes())
		rejected = append(rejected, rej...)
		if err != nil {
			return rejected, err
		}
		start = end
	}
	return rejected, nil
}

// send writes the items at idx (already encoded in body, when not nil) until
// each is stored or rejected, re-sending only the items that failed
// transiently, and splitting the request when OpenSearch refuses it whole.
func (w *Writer) send(ctx context.Context, items []Item, idx []int, body []byte) ([]Rejected, error) {
	var rejected []Rejected
	backoff := w.opts.Backoff
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if w.opts.MaxRetries > 0 && attempt > w.opts.MaxRetries {
				return rejected, fmt.Errorf("write %d documents: %w", len(idx), ErrRetriesExhausted)
			}
			w.m.Retries.Inc()
			if !sleepJitter(ctx, backoff) {
				return rejected, ctx.Err()
			}
			backoff = min(2*backoff, w.opts.MaxBackoff)
			body = nil
		}
		if body == nil {
			body = encode(items, idx)
		}
		if err := ctx.Err(); err != nil {
			return rejected, err
		}
		resp, err := w.do(ctx, body, len(idx))
		if err != nil {
			if ctx.Err() != nil {
				return rejected, ctx.Err()
			}
			w.m.Failures.WithLabelValues(failureReason(resp.status)).Inc()
			if timedOut(err) && len(idx) > 1 {
				// A busy node goes on with a request its client gave up on:
				// the same request again would time out again, each copy
				// adding to the node's queue. After the backoff, halves,
				// which fit the timeout where the whole did not.
				if !sleepJitter(ctx, backoff) {
					return rejected, ctx.Err()
				}
				w.m.Splits.Inc()
				return w.sendHalves(ctx, items, idx, rejected)
			}
			continue
		}
		if resp.refused {
			return w.split(ctx, items, idx, len(body), resp, rejected)
		}
		var retry []int
		for k, i := range idx {
			r := resp.items[k]
			switch {
			case r.Status >= 200 && r.Status < 300:
				w.m.Docs.WithLabelValues("stored").Inc()
			case r.Status == http.StatusConflict && items[i].Update != nil:
				retry = append(retry, i)
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
		idx, body = retry, nil
	}
}

// split handles a request OpenSearch refused whole (resp.refused): its one
// item is rejected, or its halves are sent on their own, so that only the
// document at fault is rejected and every other one is stored.
func (w *Writer) split(ctx context.Context, items []Item, idx []int, size int, resp response, rejected []Rejected) ([]Rejected, error) {
	if len(idx) == 1 {
		w.m.Docs.WithLabelValues("rejected").Inc()
		reason := resp.reason
		if resp.status == http.StatusRequestEntityTooLarge {
			reason = fmt.Sprintf("a request of this document alone (%d bytes) is too large for OpenSearch (http.max_content_length): %s", size, reason)
		}
		return append(rejected, Rejected{Item: items[idx[0]], Status: resp.status, Reason: reason}), nil
	}
	w.m.Splits.Inc()
	return w.sendHalves(ctx, items, idx, rejected)
}

// sendHalves sends the items at idx as two requests, one after the other.
func (w *Writer) sendHalves(ctx context.Context, items []Item, idx []int, rejected []Rejected) ([]Rejected, error) {
	half := len(idx) / 2
	for _, part := range [][]int{idx[:half], idx[half:]} {
		rej, err := w.send(ctx, items, part, nil)
		rejected = append(rejected, rej...)
		if err != nil {
			return rejected, err
		}
	}
	return rejected, nil
}

// sleepJitter waits between d/2 and d (full jitter keeps several writers
// from retrying in step); false when ctx ended first.
func sleepJitter(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d/2 + rand.N(d/2+1)):
		return true
	}
}

// timedOut says whether a request failed on the client's timeout (the
// node did not answer in time), not on a refused or broken connection.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// encode is the bulk body of the items at idx.
func encode(items []Item, idx []int) []byte {
	var b bytes.Buffer
	for _, i := range idx {
		appendItem(&b, &items[i])
	}
	return b.Bytes()
}

// transient reports whether an item status may succeed when sent again.
func transient(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// refusedWhole reports whether a whole-request status is about the request's
// content (so splitting it finds the document at fault) rather than a
// passing condition or the configuration (retried).
func refusedWhole(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusForbidden,
		http.StatusNotFound, http.StatusProxyAuthRequired:
		return false
	}
	return status >= 400 && status < 500
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
		return truncate(r.Error, 500)
	}
	s := e.Type + ": " + e.Reason
	if e.CausedBy != nil {
		s += " (" + e.CausedBy.Type + ": " + e.CausedBy.Reason + ")"
	}
	return truncate([]byte(s), 1000)
}

// response is what one bulk request got: per-item results, or the whole
// request refused for its content (refused, with status and reason).
type response struct {
	status  int
	items   []itemResult
	refused bool
	reason  string
}

// Bounds of a bulk response read into memory: a node answers about 100
// bytes per stored item and a few hundred per failed one.
const (
	maxResponseBase    = 16 << 20
	maxResponsePerItem = 2 << 10
)

// bulkPath asks for only what parseResponse reads: whether any item
// failed, and each item's status and error. A whole response names every
// item's index, id, version, shards and sequence numbers (about 150 bytes an
// item, read, gunzipped and held for nothing); the filtered one about 25.
const bulkPath = "/_bulk?filter_path=errors,items.*.status,items.*.error"

// do performs one bulk request of n items. A non-nil error means the whole
// request failed transiently (resp.status 0 for a connection error).
func (w *Writer) do(ctx context.Context, body []byte, n int) (response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, bulkPath, bytes.NewReader(body))
	if err != nil {
		return response{}, fmt.Errorf("build bulk request: %w", err)
	}
	req.Header = http.Header{"Content-Type": {"application/x-ndjson"}}
	start := time.Now()
	resp, err := w.cl.Client.Perform(req)
	if err != nil {
		return response{}, fmt.Errorf("bulk request: %w", err)
	}
	defer resp.Body.Close()
	limit := int64(maxResponseBase) + int64(n)*maxResponsePerItem
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	w.m.Latency.Observe(time.Since(start).Seconds())
	w.m.Requests.Inc()
	w.m.Bytes.Add(float64(len(body)))
	out := response{status: resp.StatusCode}
	switch {
	case err != nil:
		return out, fmt.Errorf("read bulk response: %w", err)
	case int64(len(raw)) > limit:
		return out, fmt.Errorf("read bulk response: more than %d bytes for %d items", limit, n)
	case refusedWhole(resp.StatusCode):
		out.refused, out.reason = true, fmt.Sprintf("HTTP %d: %s", resp.StatusCode, requestError(raw))
		return out, nil
	case resp.StatusCode != http.StatusOK:
		return out, fmt.Errorf("bulk request: HTTP %d: %s", resp.StatusCode, truncate(raw, 200))
	}
	if out.items, err = parseResponse(raw, n); err != nil {
		return out, err
	}
	return out, nil
}

// requestError is the reason of a refused request: the error's type and
// reason when the body is OpenSearch's JSON error, else the body's start.
func requestError(raw []byte) string {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && len(e.Error) > 0 {
		return itemResult{Error: e.Error}.reason()
	}
	return truncate(raw, 500)
}

// parseResponse reads the per-item results of a 200 bulk response of n
// items.
func parseResponse(raw []byte, n int) ([]itemResult, error) {
	out := make([]itemResult, n)
	if allStored(raw) {
		// The common case: no item failed, so the per-item array (megabytes
		// for a large request) need not be decoded.
		for k := range out {
			out[k].Status = http.StatusCreated
		}
		return out, nil
	}
	var parsed struct {
		Items []struct {
			Index  *itemResult `json:"index"`
			Create *itemResult `json:"create"`
			Update *itemResult `json:"update"`
			Delete *itemResult `json:"delete"`
		} `json:"items"`
	}
	if err := json.Unmarshal(raw, &parsed); err != nil {
		return nil, fmt.Errorf("parse bulk response: %w", err)
	}
	if len(parsed.Items) != n {
		return nil, fmt.Errorf("parse bulk response: %d items for %d sent", len(parsed.Items), n)
	}
	for k, it := range parsed.Items {
		var r *itemResult
		for _, op := range []*itemResult{it.Index, it.Create, it.Update, it.Delete} {
			if op != nil {
				r = op
			}
		}
		if r == nil {
			return nil, fmt.Errorf("parse bulk response: item %d has no operation", k)
		}
		out[k] = *r
	}
	return out, nil
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

// bodyEstimate is about the bytes appendItem writes for the first items
// that fit maxBytes (plus the one past it, which may go alone).
func bodyEstimate(items []Item, maxBytes int) int {
	n := 0
	for i := range items {
		it := &items[i]
		doc := len(it.Doc)
		if it.Update != nil {
			doc = len(it.Update)
		}
		n += doc + len(it.Index) + len(it.ID) + 64
		if n > maxBytes {
			break
		}
	}
	return n
}

func appendItem(b *bytes.Buffer, it *Item) {
	op, doc := "index", it.Doc
	switch {
	case it.Update != nil:
		op, doc = "update", it.Update
	case it.Create:
		op = "create"
	}
	b.WriteString(`{"`)
	b.WriteString(op)
	b.WriteString(`":{"_index":`)
	writeJSONString(b, it.Index)
	b.WriteString(`,"_id":`)
	writeJSONString(b, it.ID)
	if it.Update != nil {
		b.WriteString(`,"retry_on_conflict":3`)
	}
	b.WriteString("}}\n")
	doc = bytes.TrimSpace(doc)
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

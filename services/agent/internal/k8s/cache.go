package k8s

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config says where the API server is and which node's pods to keep.
type Config struct {
	Server    string // https://host:port
	TokenFile string // bearer token, read again at every request (tokens rotate); "" for none
	CAFile    string // the API server's CA; "" for the system pool
	NodeName  string
	MaxPods   int // most pods kept; a node runs at most a few hundred
}

// DefaultMaxPods bounds the cache: a node runs at most a few hundred pods.
const DefaultMaxPods = 1024

// ClusterServer is the URL of the API server of the cluster the process runs
// in (KUBERNETES_SERVICE_HOST and _PORT, set in every pod), or "" outside one.
func ClusterServer() string {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return ""
	}
	return "https://" + net.JoinHostPort(host, port)
}

// Bounds on what the API server sends: a list page of 500 pods is a few MiB,
// one watch event one pod.
const (
	pageSize      = 500
	maxListBytes  = 64 << 20
	maxEventBytes = 4 << 20
	watchSeconds  = 300
	maxBackoff    = 30 * time.Second
)

// Cache holds the pods of one node, kept current by a list and a watch.
type Cache struct {
	cfg    Config
	client *http.Client
	log    *slog.Logger

	mu   sync.RWMutex
	pods map[string]*pod // by UID

	// Counters, read by the agent's metrics.
	Events    atomic.Uint64 // watch events applied
	Relists   atomic.Uint64 // full lists (the first, and after a watch expired)
	Errors    atomic.Uint64 // failed requests and undecodable answers
	Overflows atomic.Uint64 // pods not kept because MaxPods were
}

// New checks cfg and prepares the client; Run fills the cache.
func New(cfg Config, log *slog.Logger) (*Cache, error) {
	u, err := url.Parse(cfg.Server)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("kubernetes API server %q: want https://host:port", cfg.Server)
	}
	if cfg.NodeName == "" {
		return nil, errors.New("kubernetes metadata needs the node name (the downward API's spec.nodeName)")
	}
	if cfg.MaxPods <= 0 {
		cfg.MaxPods = DefaultMaxPods
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kubernetes CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kubernetes CA %s: no PEM certificate", cfg.CAFile)
		}
		tlsConfig.RootCAs = pool
	}
	transport := &http.Transport{
		TLSClientConfig:       tlsConfig,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		MaxIdleConns:          2,
	}
	return &Cache{cfg: cfg, client: &http.Client{Transport: transport}, log: log, pods: map[string]*pod{}}, nil
}

// Lookup returns the metadata of the process in container containerID of the
// pod with UID podUID.
func (c *Cache) Lookup(podUID, containerID string) (Meta, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	p, ok := c.pods[podUID]
	if !ok {
		return Meta{}, false
	}
	return p.meta(containerID), true
}

// Len is the number of pods kept.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.pods)
}

// Run lists the node's pods, then watches them, until ctx ends. A failed
// request is retried with backoff; an expired watch (410 Gone) lists again.
func (c *Cache) Run(ctx context.Context) error {
	backoff := time.Second
	wait := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
		return true
	}
	for ctx.Err() == nil {
		version, err := c.list(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			c.Errors.Add(1)
			c.log.Warn("list kubernetes pods", "err", err)
			if !wait() {
				break
			}
			continue
		}
		backoff = time.Second
		for ctx.Err() == nil {
			version, err = c.watch(ctx, version)
			if errors.Is(err, errGone) {
				break
			}
			if err != nil && ctx.Err() == nil {
				c.Errors.Add(1)
				c.log.Warn("watch kubernetes pods", "err", err)
				if !wait() {
					break
				}
			} else {
				backoff = time.Second
			}
		}
	}
	return nil
}

var errGone = errors.New("watch expired")

// list replaces the cache with the node's pods and returns the list's
// resource version, from which the watch starts.
func (c *Cache) list(ctx context.Context) (string, error) {
	pods := map[string]*pod{}
	var version, cont string
	var total int64
	for {
		q := c.query()
		q.Set("limit", strconv.Itoa(pageSize))
		if cont != "" {
			q.Set("continue", cont)
		}
		body, err := c.get(ctx, q, 60*time.Second)
		if err != nil {
			return "", err
		}
		var page struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
				Continue        string `json:"continue"`
			} `json:"metadata"`
			Items []podJSON `json:"items"`
		}
		lr := &io.LimitedReader{R: body, N: maxListBytes - total}
		err = json.NewDecoder(lr).Decode(&page)
		body.Close()
		total += maxListBytes - total - lr.N
		if lr.N <= 0 {
			return "", fmt.Errorf("pod list larger than %d bytes", maxListBytes)
		}
		if err != nil {
			return "", fmt.Errorf("decode pod list: %w", err)
		}
		for i := range page.Items {
			if p, ok := fromJSON(&page.Items[i]); ok {
				if len(pods) == c.cfg.MaxPods {
					c.Overflows.Add(1)
					continue
				}
				pods[p.uid] = p
			}
		}
		version, cont = page.Metadata.ResourceVersion, page.Metadata.Continue
		if cont == "" {
			break
		}
	}
	c.mu.Lock()
	c.pods = pods
	c.mu.Unlock()
	c.Relists.Add(1)
	return version, nil
}

// watch applies the pod events from version on until the server ends the
// watch, and returns the last version seen.
func (c *Cache) watch(ctx context.Context, version string) (string, error) {
	q := c.query()
	q.Set("watch", "1")
	q.Set("allowWatchBookmarks", "true")
	q.Set("timeoutSeconds", strconv.Itoa(watchSeconds))
	if version != "" {
		q.Set("resourceVersion", version)
	}
	body, err := c.get(ctx, q, 0)
	if err != nil {
		return version, err
	}
	defer body.Close()
	in := &eventReader{r: body}
	dec := json.NewDecoder(in)
	for {
		in.n = 0
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return version, nil
			}
			return version, fmt.Errorf("decode watch event: %w", err)
		}
		if ev.Type == "ERROR" {
			var st struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			_ = json.Unmarshal(ev.Object, &st)
			if st.Code == http.StatusGone {
				return version, errGone
			}
			return version, fmt.Errorf("watch error %d: %.200s", st.Code, st.Message)
		}
		var obj podJSON
		if err := json.Unmarshal(ev.Object, &obj); err != nil {
			return version, fmt.Errorf("decode watched pod: %w", err)
		}
		if v := obj.Metadata.ResourceVersion; v != "" {
			version = v
		}
		c.apply(ev.Type, &obj)
	}
}

// apply changes the cache by one watch event.
func (c *Cache) apply(kind string, obj *podJSON) {
	switch kind {
	case "ADDED", "MODIFIED", "DELETED":
	default: // BOOKMARK: only the version moves
		return
	}
	p, ok := fromJSON(obj)
	if !ok {
		return
	}
	c.Events.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if kind == "DELETED" {
		delete(c.pods, p.uid)
		return
	}
	if _, known := c.pods[p.uid]; !known && len(c.pods) >= c.cfg.MaxPods {
		c.Overflows.Add(1)
		return
	}
	c.pods[p.uid] = p
}

// query selects the pods scheduled on the node.
func (c *Cache) query() url.Values {
	return url.Values{"fieldSelector": {"spec.nodeName=" + c.cfg.NodeName}}
}

// get sends GET /api/v1/pods?q and returns the body of a 200 answer.
func (c *Cache) get(ctx context.Context, q url.Values, timeout time.Duration) (io.ReadCloser, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		body, err := c.do(ctx, q)
		if err != nil {
			cancel()
			return nil, err
		}
		return cancelOnClose{body, cancel}, nil
	}
	return c.do(ctx, q)
}

func (c *Cache) do(ctx context.Context, q url.Values) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.cfg.Server, "/")+"/api/v1/pods?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if c.cfg.TokenFile != "" {
		tok, err := os.ReadFile(c.cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("kubernetes token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("GET pods: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return resp.Body, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// eventReader fails a watch stream whose one event exceeds maxEventBytes; n
// is reset before each event is decoded.
type eventReader struct {
	r io.Reader
	n int
}

func (e *eventReader) Read(p []byte) (int, error) {
	if e.n >= maxEventBytes {
		return 0, fmt.Errorf("watch event larger than %d bytes", maxEventBytes)
	}
	if len(p) > maxEventBytes-e.n {
		p = p[:maxEventBytes-e.n]
	}
	n, err := e.r.Read(p)
	e.n += n
	return n, err
}

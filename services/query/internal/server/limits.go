package server

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the request limits (docs/QUERY.md, "Limits").
const (
	// DefaultQueueWait is how long an API request waits for a free slot
	// before it is refused: long enough to ride out a page load's burst,
	// short enough that a client learns quickly to come back.
	DefaultQueueWait = 2 * time.Second
	// DefaultMaxURLBytes bounds an API request's path and query string:
	// three 4 KiB selectors, percent-encoded, fit; longer ones (lists of
	// hosts, up to selector.MaxLength) go in a POST form body.
	DefaultMaxURLBytes = 32 << 10
	// MaxHeaderBytes bounds the request line and headers (Go answers 431
	// beyond it); Go's own default is 1 MiB.
	MaxHeaderBytes = 64 << 10
	// maxWaitingPerSlot bounds the requests waiting for a slot, so a flood
	// is refused at once instead of piling up goroutines for QueueWait.
	maxWaitingPerSlot = 4
)

// DefaultMaxConcurrent is twice GOMAXPROCS, at least 4. An API request
// mostly waits on OpenSearch, then merges and encodes on one core: two per
// core keeps the cores busy while half the requests wait, and the memory of
// the merges in flight (each bounded by STACKSTREAM_QUERY_MAX_STACKS, or
// STACKSTREAM_QUERY_MAX_EDGE_STACKS for the edges around tree hours) stays
// a small multiple of one.
func DefaultMaxConcurrent() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// HTTPServer is the http.Server for h with the time-outs a client-facing
// server needs: headers within 10 s, the whole request within 30 s (the
// API takes at most a 1 MiB form), the answer within the request time-out plus the
// queue wait plus 30 s to write it (a pprof export over a slow link), idle
// keep-alive connections closed after 2 min.
func HTTPServer(h http.Handler, requestTimeout, queueWait time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      requestTimeout + queueWait + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}

// ParseAllowedHosts reads STACKSTREAM_QUERY_ALLOWED_HOSTS: host names or IP
// addresses (IPv6 with or without brackets) without ports, comma
// separated, or "*" for any.
func ParseAllowedHosts(s string) ([]string, error) {
	var hosts []string
	for _, h := range strings.Split(s, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if h != "*" && normalizeHost(h) == "" {
			return nil, fmt.Errorf("STACKSTREAM_QUERY_ALLOWED_HOSTS: %q is not a host name or IP address: give names or addresses without ports, comma separated, or *", h)
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("STACKSTREAM_QUERY_ALLOWED_HOSTS=%q names no host: leave it unset for the defaults", s)
	}
	return hosts, nil
}

// DefaultAllowedHosts are the Host names accepted when
// STACKSTREAM_QUERY_ALLOWED_HOSTS is unset: the listen address's host and
// the loopback names; a listener on every address (0.0.0.0, ::, or no
// host) also accepts the machine's own addresses and host name, which a
// DNS-rebinding page cannot send (it sends its own domain).
func DefaultAllowedHosts(listenAddr string) []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	host, _, err := net.SplitHostPort(listenAddr)
	if err != nil {
		host = listenAddr
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	if host != "" && (ip == nil || !ip.IsUnspecified()) {
		return append(hosts, host)
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				hosts = append(hosts, n.IP.String())
			}
		}
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		hosts = append(hosts, name)
	}
	return hosts
}

// normalizeHost returns h (a Host header without its port, or an allowed
// host) lower-cased, without IPv6 brackets or a trailing dot, or "" when
// it is neither a host name nor an IP address.
func normalizeHost(h string) string {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
		if ip := net.ParseIP(h); ip == nil || ip.To4() != nil {
			return ""
		}
	}
	if ip := net.ParseIP(h); ip != nil {
		return ip.String()
	}
	if h == "" || len(h) > 253 {
		return ""
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return ""
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return ""
			}
		}
	}
	return h
}

// requestHost is the host of a request's Host header, normalized, or "".
func requestHost(hostport string) string {
	host := hostport
	if h, port, err := net.SplitHostPort(hostport); err == nil {
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return ""
		}
		host = h
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
	}
	return normalizeHost(host)
}

// rejections counts requests refused before reaching an endpoint, by reason.
type rejections struct {
	total    *prometheus.CounterVec
	inFlight prometheus.Gauge
	waiting  prometheus.Gauge
}

func newRejections(reg prometheus.Registerer) rejections {
	r := rejections{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_query_rejected_requests_total",
			Help: "Requests refused before an endpoint ran, by reason: host (Host header not allowed), busy (no free slot within the queue wait), url_too_long.",
		}, []string{"reason"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stackstream_query_requests_in_flight", Help: "API requests running (at most STACKSTREAM_QUERY_MAX_CONCURRENT)."}),
		waiting:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "stackstream_query_requests_waiting", Help: "API requests waiting for a free slot."}),
	}
	for _, reason := range []string{"host", "busy", "url_too_long"} {
		r.total.WithLabelValues(reason)
	}
	reg.MustRegister(r.total, r.inFlight, r.waiting)
	return r
}

// checkHost refuses requests whose Host header is not allowed: a page on
// another domain that re-resolves its name to 127.0.0.1 (DNS rebinding)
// reaches this port as same-origin, and its requests carry its own name.
func checkHost(allowed []string, rej rejections, next http.Handler) http.Handler {
	set := map[string]bool{}
	for _, h := range allowed {
		if h == "*" {
			return next
		}
		set[normalizeHost(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := requestHost(r.Host); h != "" && set[h] {
			next.ServeHTTP(w, r)
			return
		}
		rej.total.WithLabelValues("host").Inc()
		shown := r.Host
		if len(shown) > 100 {
			shown = shown[:100] + "..."
		}
		writeError(w, http.StatusForbidden, fmt.Sprintf("host %q is not allowed: add it to STACKSTREAM_QUERY_ALLOWED_HOSTS to serve it (the check keeps other sites' pages out through DNS rebinding)", shown))
	})
}

// limitURL refuses API requests whose path and query string are longer
// than maxBytes, before anything parses them.
func limitURL(maxBytes int, rej rejections, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := len(r.RequestURI)
		if n == 0 { // a request made in process, not read off a connection
			n = len(r.URL.EscapedPath()) + len(r.URL.RawQuery)
		}
		if n > maxBytes {
			rej.total.WithLabelValues("url_too_long").Inc()
			writeError(w, http.StatusRequestURITooLong, fmt.Sprintf("request URL of %d bytes is longer than %d: shorten the selectors", n, maxBytes))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limiter runs at most cap(slots) API requests at once; others wait up to
// wait for a slot (at most maxWaitingPerSlot per slot wait), then get 503
// with Retry-After.
type limiter struct {
	slots      chan struct{}
	wait       time.Duration
	waiting    atomic.Int64
	maxWaiting int64
	rej        rejections
}

func newLimiter(n int, wait time.Duration, rej rejections) *limiter {
	return &limiter{slots: make(chan struct{}, n), wait: wait, maxWaiting: int64(n * maxWaitingPerSlot), rej: rej}
}

func (l *limiter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !l.acquire(r) {
			l.rej.total.WithLabelValues("busy").Inc()
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(l.wait.Round(time.Second)/time.Second))))
			writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("busy: %d API requests are running (STACKSTREAM_QUERY_MAX_CONCURRENT) and none finished within %s: retry later", cap(l.slots), l.wait))
			return
		}
		l.rej.inFlight.Inc()
		defer func() {
			l.rej.inFlight.Dec()
			<-l.slots
		}()
		next.ServeHTTP(w, r)
	})
}

func (l *limiter) acquire(r *http.Request) bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	if l.waiting.Add(1) > l.maxWaiting {
		l.waiting.Add(-1)
		return false
	}
	l.rej.waiting.Inc()
	defer func() {
		l.waiting.Add(-1)
		l.rej.waiting.Dec()
	}()
	t := time.NewTimer(l.wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-r.Context().Done():
		return false
	}
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// Package heap scrapes pprof heap profiles from HTTP endpoints (a Go
// service's /debug/pprof/heap).
package heap

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
)

// Errors of a scrape, checked with errors.Is.
var (
	// ErrTooLarge: the response or its decompressed profile exceeds Limits.
	ErrTooLarge = errors.New("heap profile too large")
	// ErrInvalid: the response is not a pprof profile.
	ErrInvalid = errors.New("not a pprof profile")
)

// Limits bound what one scrape may cost the agent, which runs as root and
// reads endpoints that other people's services serve.
type Limits struct {
	// MaxCompressedBytes bounds the response body (default 4 MiB; a busy Go
	// service's heap profile is tens to hundreds of KiB).
	MaxCompressedBytes int64
	// MaxBytes bounds the profile once decompressed (default 8 MiB): gzip
	// expands up to ~1000 times, so the body bound alone is not enough.
	MaxBytes int64
	// MaxEntries bounds the messages the decoded profile may hold: samples,
	// locations, functions, mappings, strings, sample labels and location
	// lines (default 200,000). A message costs the parser ~200 bytes of Go
	// objects whatever its wire size, so bytes alone would let 4 MiB of
	// empty messages take ~450 MiB.
	MaxEntries int
	// Timeout bounds one scrape, connecting to reading the last byte
	// (default 5 s, at most the interval).
	Timeout time.Duration
}

// DefaultLimits are the documented defaults (docs/AGENT.md).
var DefaultLimits = Limits{MaxCompressedBytes: 4 << 20, MaxBytes: 8 << 20, MaxEntries: 200_000, Timeout: 5 * time.Second}

// Target is one endpoint and the service its samples are labelled with.
type Target struct {
	Service string
	URL     string
}

// ParseTargets reads "service=url" or bare "url" entries; a bare URL's
// service is its host:port.
func ParseTargets(entries []string) ([]Target, error) {
	var out []Target
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		svc, raw, ok := strings.Cut(e, "=")
		if !ok || strings.Contains(svc, "/") || strings.Contains(svc, ":") {
			svc, raw = "", e
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("heap endpoint %q: want [service=]http://host:port/debug/pprof/heap", e)
		}
		if svc == "" {
			svc = u.Host
		}
		out = append(out, Target{Service: record.TruncateUTF8(svc, record.MaxServiceBytes), URL: u.String()})
	}
	return out, nil
}

// NewClient returns the HTTP client scrapes share: every phase is bounded by
// lim.Timeout, and redirects are not followed (the endpoint is configured
// explicitly; a redirect would let the scraped service send the agent
// elsewhere).
func NewClient(lim Limits) *http.Client {
	tr := &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            (&net.Dialer{Timeout: lim.Timeout}).DialContext,
		TLSHandshakeTimeout:    lim.Timeout,
		ResponseHeaderTimeout:  lim.Timeout,
		MaxResponseHeaderBytes: 64 << 10,
		MaxIdleConnsPerHost:    1,
		IdleConnTimeout:        time.Minute,
		// Compressed bodies are bounded by Decode, not inflated by the transport.
		DisableCompression: true,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       lim.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Scrape fetches t's profile within lim, checks it is pprof, and labels every
// sample with the service. Every error names the URL.
func Scrape(ctx context.Context, cl *http.Client, t Target, lim Limits) (*profile.Profile, error) {
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", t.URL, err)
	}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", t.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %s", t.URL, resp.Status)
	}
	if resp.ContentLength > lim.MaxCompressedBytes {
		return nil, fmt.Errorf("scrape %s: %w: content length %d over %d bytes", t.URL, ErrTooLarge, resp.ContentLength, lim.MaxCompressedBytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, lim.MaxCompressedBytes+1))
	if err != nil {
		return nil, fmt.Errorf("scrape %s: read body: %w", t.URL, err)
	}
	if int64(len(body)) > lim.MaxCompressedBytes {
		return nil, fmt.Errorf("scrape %s: %w: body over %d bytes", t.URL, ErrTooLarge, lim.MaxCompressedBytes)
	}
	p, err := Decode(body, lim)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", t.URL, err)
	}
	for _, s := range p.Sample {
		if s.Label == nil {
			s.Label = map[string][]string{}
		}
		s.Label[record.LabelService] = []string{t.Service}
	}
	return p, nil
}

func isGzip(b []byte) bool { return len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b }

// Decode parses a scraped body: gzip pprof (what /debug/pprof/heap serves) or
// uncompressed pprof; legacy text formats (?debug=1) are refused, since their
// cost cannot be bounded before parsing. Decompression stops at lim.MaxBytes,
// a body over lim.MaxCompressedBytes is refused, and the messages are
// counted against lim.MaxEntries before anything is allocated for them.
func Decode(body []byte, lim Limits) (*profile.Profile, error) {
	if int64(len(body)) > lim.MaxCompressedBytes {
		return nil, fmt.Errorf("%w: body of %d bytes over %d", ErrTooLarge, len(body), lim.MaxCompressedBytes)
	}
	raw := body
	if isGzip(body) {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("%w: gunzip: %v", ErrInvalid, err)
		}
		if raw, err = io.ReadAll(io.LimitReader(zr, lim.MaxBytes+1)); err != nil {
			return nil, fmt.Errorf("%w: gunzip: %v", ErrInvalid, err)
		}
		if int64(len(raw)) > lim.MaxBytes {
			return nil, fmt.Errorf("%w: decompresses beyond %d bytes", ErrTooLarge, lim.MaxBytes)
		}
		// profile.ParseData would inflate a nested gzip stream without a bound.
		if isGzip(raw) {
			return nil, fmt.Errorf("%w: gzip inside gzip", ErrInvalid)
		}
	} else if int64(len(body)) > lim.MaxBytes {
		return nil, fmt.Errorf("%w: profile of %d bytes over %d", ErrTooLarge, len(body), lim.MaxBytes)
	}
	if err := checkEntries(raw, lim.MaxEntries); err != nil {
		return nil, err
	}
	p, err := parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	// A sample naming a location the profile does not define would panic
	// whoever walks it next.
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return p, nil
}

// parse turns a panic of the pprof parsers on hostile input into an error:
// one endpoint's body must cost its scrape, not the agent.
func parse(raw []byte) (p *profile.Profile, err error) {
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, fmt.Errorf("malformed: %v", r)
		}
	}()
	return profile.ParseUncompressed(raw)
}

// Field numbers of profile.proto that hold repeated messages inside a sample
// and a location.
const (
	fieldSample        = 2 // Profile.sample
	fieldLocation      = 4 // Profile.location
	fieldSampleLabel   = 3 // Sample.label
	fieldLocationLines = 4 // Location.line
)

// checkEntries walks the protobuf wire format of a Profile without decoding
// it and fails once it holds more than limit messages (top-level fields,
// plus labels of samples and lines of locations).
func checkEntries(b []byte, limit int) error {
	n := 0
	for len(b) > 0 {
		field, wire, value, rest, err := nextField(b)
		if err != nil {
			return err
		}
		n++
		if wire == 2 {
			switch field {
			case fieldSample:
				n += countField(value, fieldSampleLabel)
			case fieldLocation:
				n += countField(value, fieldLocationLines)
			}
		}
		if n > limit {
			return fmt.Errorf("%w: more than %d messages", ErrTooLarge, limit)
		}
		b = rest
	}
	return nil
}

// countField counts the length-delimited occurrences of field in message b;
// a malformed message counts what precedes the fault (the parser refuses it).
func countField(b []byte, field uint64) int {
	n := 0
	for len(b) > 0 {
		f, wire, _, rest, err := nextField(b)
		if err != nil {
			return n
		}
		if f == field && wire == 2 {
			n++
		}
		b = rest
	}
	return n
}

// nextField splits the first field off b: its number, wire type, the bytes
// of a length-delimited value, and what follows.
func nextField(b []byte) (field uint64, wire int, value, rest []byte, err error) {
	tag, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, 0, nil, nil, fmt.Errorf("%w: bad field tag", ErrInvalid)
	}
	b = b[k:]
	field, wire = tag>>3, int(tag&7)
	switch wire {
	case 0:
		if _, k = binary.Uvarint(b); k <= 0 {
			return 0, 0, nil, nil, fmt.Errorf("%w: bad varint of field %d", ErrInvalid, field)
		}
		return field, wire, nil, b[k:], nil
	case 1, 5:
		size := 8
		if wire == 5 {
			size = 4
		}
		if len(b) < size {
			return 0, 0, nil, nil, fmt.Errorf("%w: field %d truncated", ErrInvalid, field)
		}
		return field, wire, nil, b[size:], nil
	case 2:
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return 0, 0, nil, nil, fmt.Errorf("%w: field %d truncated", ErrInvalid, field)
		}
		return field, wire, b[k : k+int(l)], b[k+int(l):], nil
	}
	return 0, 0, nil, nil, fmt.Errorf("%w: wire type %d of field %d", ErrInvalid, wire, field)
}

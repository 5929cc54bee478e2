// Package heap scrapes pprof heap profiles from HTTP endpoints (a Go
// service's /debug/pprof/heap).
package heap

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
)

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
		out = append(out, Target{Service: svc, URL: u.String()})
	}
	return out, nil
}

// Scrape fetches t's profile, checks it is pprof, and labels every sample
// with the service.
func Scrape(ctx context.Context, cl *http.Client, t Target) (*profile.Profile, error) {
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
	body, err := io.ReadAll(io.LimitReader(resp.Body, record.MaxProfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", t.URL, err)
	}
	if len(body) > record.MaxProfileBytes {
		return nil, fmt.Errorf("scrape %s: profile larger than %d bytes", t.URL, record.MaxProfileBytes)
	}
	p, err := profile.ParseData(body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: not a pprof profile: %w", t.URL, err)
	}
	for _, s := range p.Sample {
		if s.Label == nil {
			s.Label = map[string][]string{}
		}
		s.Label[record.LabelService] = []string{t.Service}
	}
	return p, nil
}

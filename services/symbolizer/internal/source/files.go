package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stackstream/stackstream/services/symbolizer/internal/symtab"
)

// Dirs reads debug files from directories laid out as
// <dir>/.build-id/<first two hex digits>/<rest>.debug, the layout of
// /usr/lib/debug that distributions' -dbg/-debuginfo packages fill.
type Dirs struct{ Dirs []string }

// Name implements Source.
func (Dirs) Name() string { return "local" }

// Fetch implements Source. Next to the .debug file the layout may hold the
// executable itself (<rest> without suffix); it is tried second.
func (d Dirs) Fetch(_ context.Context, buildID string) (*symtab.Table, error) {
	if len(buildID) < 3 {
		return nil, notFound("build id %q too short for the .build-id layout", buildID)
	}
	for _, dir := range d.Dirs {
		base := filepath.Join(dir, ".build-id", buildID[:2], buildID[2:])
		for _, path := range []string{base + ".debug", base} {
			tab, err := openTable(path, buildID)
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, symtab.ErrNoSymbols) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", path, err)
			}
			return tab, nil
		}
	}
	return nil, notFound("no %s/.build-id entry", strings.Join(d.Dirs, ","))
}

func openTable(path, buildID string) (*symtab.Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return symtab.FromELF(f, buildID, "local")
}

// MaxDownloadBytes bounds one debuginfod download held in memory.
const MaxDownloadBytes = 1 << 30

// Debuginfod downloads debug files from debuginfod servers (the
// DEBUGINFOD_URLS convention: base URLs separated by spaces), asking
// /buildid/<id>/debuginfo and then /buildid/<id>/executable.
type Debuginfod struct {
	URLs   []string
	Client *http.Client
}

// ParseURLs splits a DEBUGINFOD_URLS value and checks every URL.
func ParseURLs(s string) ([]string, error) {
	var out []string
	for _, u := range strings.Fields(s) {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, fmt.Errorf("debuginfod URL %q: want http(s)://host[:port][/path]", u)
		}
		out = append(out, strings.TrimRight(u, "/"))
	}
	return out, nil
}

// NewDebuginfod returns a source over urls with a per-request timeout.
func NewDebuginfod(urls []string, timeout time.Duration) *Debuginfod {
	return &Debuginfod{URLs: urls, Client: &http.Client{Timeout: timeout}}
}

// Name implements Source.
func (Debuginfod) Name() string { return "debuginfod" }

// Fetch implements Source.
func (d *Debuginfod) Fetch(ctx context.Context, buildID string) (*symtab.Table, error) {
	var errs []error
	for _, kind := range []string{"debuginfo", "executable"} {
		for _, base := range d.URLs {
			body, err := d.get(ctx, base+"/buildid/"+buildID+"/"+kind)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			tab, err := symtab.FromELF(bytes.NewReader(body), buildID, "debuginfod")
			if errors.Is(err, symtab.ErrNoSymbols) {
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %w", base, kind, err))
				continue
			}
			return tab, nil
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return nil, notFound("no debuginfod server has %s", buildID)
}

func (d *Debuginfod) get(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("build request %s: %w", u, err)
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", u, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, ErrNotFound
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("get %s: %s", u, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxDownloadBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", u, err)
	}
	if len(body) > MaxDownloadBytes {
		return nil, fmt.Errorf("get %s: larger than %d bytes", u, MaxDownloadBytes)
	}
	return body, nil
}

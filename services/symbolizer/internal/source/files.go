package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
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
type Dirs struct {
	Dirs   []string
	Limits symtab.Limits // zero: symtab.DefaultLimits
}

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
			tab, err := openTable(path, buildID, d.Limits)
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

func openTable(path, buildID string, lim symtab.Limits) (*symtab.Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return symtab.FromELFLimits(f, buildID, "local", orDefault(lim))
}

func orDefault(lim symtab.Limits) symtab.Limits {
	if lim == (symtab.Limits{}) {
		return symtab.DefaultLimits()
	}
	return lim
}

// DefaultMaxDownloadBytes bounds one debuginfod download.
const DefaultMaxDownloadBytes = 512 << 20

// ErrDownloadTooLarge means a debuginfod server offered a file larger than
// MaxDownloadBytes.
var ErrDownloadTooLarge = errors.New("debuginfod download too large")

// Debuginfod downloads debug files from debuginfod servers (the
// DEBUGINFOD_URLS convention: base URLs separated by spaces), asking
// /buildid/<id>/debuginfo and then /buildid/<id>/executable. A download
// goes to a temporary file, not memory, and is read from there within
// Limits.
type Debuginfod struct {
	URLs   []string
	Client *http.Client
	// MaxDownloadBytes bounds one download; 0 means DefaultMaxDownloadBytes.
	MaxDownloadBytes int64
	// TempDir holds downloads while they are read; "" is os.TempDir.
	TempDir string
	Limits  symtab.Limits // zero: symtab.DefaultLimits
}

// ParseURLs splits a DEBUGINFOD_URLS value and checks every URL.
func ParseURLs(s string) ([]string, error) {
	var out []string
	for _, u := range strings.Fields(s) {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, fmt.Errorf("debuginfod URL %s: want http(s)://[user:password@]host[:port][/path]", RedactURL(u))
		}
		out = append(out, strings.TrimRight(u, "/"))
	}
	return out, nil
}

// NewDebuginfod returns a source over urls. timeout bounds one request,
// body included; connecting and waiting for the response headers have
// shorter bounds of their own, so a server that does not answer is given up
// on early.
func NewDebuginfod(urls []string, timeout time.Duration) *Debuginfod {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: min(timeout, 5*time.Second), KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   min(timeout, 10*time.Second),
		ResponseHeaderTimeout: min(timeout, 15*time.Second),
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
	}
	return &Debuginfod{URLs: urls, Client: &http.Client{Timeout: timeout, Transport: tr}}
}

// Name implements Source.
func (Debuginfod) Name() string { return "debuginfod" }

// Fetch implements Source.
func (d *Debuginfod) Fetch(ctx context.Context, buildID string) (*symtab.Table, error) {
	var errs []error
	for _, kind := range []string{"debuginfo", "executable"} {
		for _, base := range d.URLs {
			tab, err := d.fetch(ctx, base, buildID, kind)
			if errors.Is(err, ErrNotFound) || errors.Is(err, symtab.ErrNoSymbols) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
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

// fetch downloads one file into a temporary file and builds its table.
func (d *Debuginfod) fetch(ctx context.Context, base, buildID, kind string) (*symtab.Table, error) {
	f, err := os.CreateTemp(d.TempDir, "stackstream-debuginfod-*")
	if err != nil {
		return nil, fmt.Errorf("create download file: %w", err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	if err := d.get(ctx, base, "/buildid/"+buildID+"/"+kind, f); err != nil {
		return nil, err
	}
	tab, err := symtab.FromELFLimits(f, buildID, "debuginfod", orDefault(d.Limits))
	if err != nil && !errors.Is(err, symtab.ErrNoSymbols) {
		return nil, fmt.Errorf("read %s from %s: %w", kind, RedactURL(base), err)
	}
	return tab, err
}

// get writes the body of base+path to w, up to MaxDownloadBytes. Errors
// name the server without its credentials.
func (d *Debuginfod) get(ctx context.Context, base, path string, w io.Writer) error {
	u, err := url.Parse(base + path)
	if err != nil {
		return fmt.Errorf("parse debuginfod URL %s: %w", RedactURL(base), ErrBadURL)
	}
	shown := RedactURL(base) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("build request %s: %w", shown, ErrBadURL)
	}
	if u.User != nil {
		// Sent as a header, so the URL in net/http's errors has none.
		pass, _ := u.User.Password()
		req.SetBasicAuth(u.User.Username(), pass)
		req.URL.User = nil
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("get %s: %w", shown, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return ErrNotFound
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("get %s: %s", shown, resp.Status)
	}
	limit := d.MaxDownloadBytes
	if limit <= 0 {
		limit = DefaultMaxDownloadBytes
	}
	if resp.ContentLength > limit {
		return fmt.Errorf("get %s: %w: %d bytes, limit %d (STACKSTREAM_SYMBOLIZER_DEBUGINFOD_MAX_BYTES)", shown, ErrDownloadTooLarge, resp.ContentLength, limit)
	}
	n, err := io.Copy(w, io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("read %s: %w", shown, err)
	}
	if n > limit {
		return fmt.Errorf("get %s: %w: more than %d bytes (STACKSTREAM_SYMBOLIZER_DEBUGINFOD_MAX_BYTES)", shown, ErrDownloadTooLarge, limit)
	}
	return nil
}

// ErrBadURL means a debuginfod URL does not parse; the message does not
// repeat it, as it may hold credentials.
var ErrBadURL = errors.New("malformed debuginfod URL")

// RedactURL is u without the credentials of its userinfo, for logs and
// errors: "https://***@host/path" for "https://user:secret@host/path".
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		// Unparseable: keep no more than the scheme, which holds no secret.
		if i := strings.Index(u, "://"); i > 0 && i < 16 {
			return u[:i+3] + "(unparseable)"
		}
		return "(unparseable URL)"
	}
	if p.User != nil {
		return p.Scheme + "://***@" + p.Host + p.EscapedPath()
	}
	return p.Scheme + "://" + p.Host + p.EscapedPath()
}

// RedactURLs redacts every URL of us.
func RedactURLs(us []string) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = RedactURL(u)
	}
	return out
}

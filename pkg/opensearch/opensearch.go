// Package opensearch builds opensearch-go clients from configuration and
// applies the index templates of schemas/indices.
package opensearch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	osgo "github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/tlsconfig"
	"github.com/stackstream/stackstream/schemas/indices"
)

// Config is the OpenSearch connection, read from STACKSTREAM_OPENSEARCH_* when
// embedded as `OpenSearch opensearch.Config `envconfig:"OPENSEARCH"“.
type Config struct {
	URLs                  []string      `envconfig:"URL" default:"http://127.0.0.1:9200" desc:"node URLs, comma separated"`
	Username              string        `envconfig:"USERNAME" desc:"basic auth user"`
	Password              string        `envconfig:"PASSWORD" desc:"basic auth password, never logged"`
	TLSCAFile             string        `envconfig:"TLS_CA_FILE" desc:"PEM CA bundle to verify nodes"`
	TLSInsecureSkipVerify bool          `envconfig:"TLS_INSECURE_SKIP_VERIFY" default:"false"`
	AllowPlaintextAuth    bool          `envconfig:"ALLOW_PLAINTEXT_AUTH" default:"false" desc:"allow basic auth over http:// to a host other than loopback (sends the password in clear)"`
	Timeout               time.Duration `envconfig:"TIMEOUT" default:"30s" desc:"per-request timeout"`
}

// Validate checks values that parse but cannot work.
func (c Config) Validate() error {
	if len(c.URLs) == 0 || c.URLs[0] == "" {
		return fmt.Errorf("STACKSTREAM_OPENSEARCH_URL is empty: set it to a node URL such as http://127.0.0.1:9200")
	}
	for _, raw := range c.URLs {
		shown := RedactURL(raw)
		if !strings.HasPrefix(raw, "http://") && !strings.HasPrefix(raw, "https://") {
			return fmt.Errorf("STACKSTREAM_OPENSEARCH_URL: %q must start with http:// or https://", shown)
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			// url's own error quotes the whole URL, credentials included.
			return fmt.Errorf("STACKSTREAM_OPENSEARCH_URL: %q is not a valid URL: use scheme://host:port", shown)
		}
		// Basic auth sends the password with every request: over http:// it
		// may only go to this host itself.
		if u.Scheme == "http" && (c.Username != "" || c.Password != "" || u.User != nil) && !isLoopback(u.Hostname()) && !c.AllowPlaintextAuth {
			return fmt.Errorf("STACKSTREAM_OPENSEARCH_URL=%s is http:// to a host other than loopback and basic auth would send the password in clear: use https://, or set STACKSTREAM_OPENSEARCH_ALLOW_PLAINTEXT_AUTH=true to accept that", shown)
		}
	}
	if c.Password != "" && c.Username == "" {
		return errors.New("STACKSTREAM_OPENSEARCH_PASSWORD is set but STACKSTREAM_OPENSEARCH_USERNAME is empty: set both or neither")
	}
	return nil
}

// isLoopback is true for localhost and loopback addresses; names are not
// resolved (a name that resolves elsewhere tomorrow is not loopback).
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// RedactURL returns u without its userinfo (shown as ***@), so URLs can be
// printed in errors and logs. A string that does not parse is cut before its
// last '@'.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	// "user:pass@host" parses as scheme "user" with an opaque part.
	if err != nil || strings.Contains(p.Opaque, "@") {
		if i := strings.LastIndex(u, "@"); i >= 0 {
			if j := strings.Index(u, "://"); j >= 0 && j < i {
				return u[:j+3] + "***" + u[i:]
			}
			return "***" + u[i:]
		}
		return u
	}
	if p.User == nil {
		return u
	}
	p.User = nil
	return strings.Replace(p.String(), "://", "://***@", 1)
}

// redactURLs joins the URLs, each without its userinfo.
func redactURLs(us []string) string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = RedactURL(u)
	}
	return strings.Join(out, ",")
}

// String prints the settings with the password and the URLs' userinfo
// masked, so a config printed with %v or %+v (alone or inside a service's
// config) never shows them.
func (c Config) String() string { return fmt.Sprintf("%+v", c.redacted()) }

// GoString does the same for %#v.
func (c Config) GoString() string { return c.String() }

// LogValue does the same for slog.
func (c Config) LogValue() slog.Value { return slog.AnyValue(c.redacted()) }

// redactedConfig has Config's fields but none of its methods, so printing it
// does not recurse.
type redactedConfig Config

func (c Config) redacted() redactedConfig {
	if c.Password != "" {
		c.Password = "REDACTED"
	}
	urls := make([]string, len(c.URLs))
	for i, u := range c.URLs {
		urls[i] = RedactURL(u)
	}
	c.URLs = urls
	return redactedConfig(c)
}

// NewClient builds a client and checks that the cluster answers and accepts
// the credentials, so bad settings stop start-up with a line naming the variable.
func NewClient(ctx context.Context, c Config) (*opensearchapi.Client, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	tc, err := tlsconfig.Build(tlsconfig.Config{
		Enabled: c.TLSCAFile != "" || c.TLSInsecureSkipVerify, CAFile: c.TLSCAFile,
		InsecureSkipVerify: c.TLSInsecureSkipVerify, VarPrefix: "STACKSTREAM_OPENSEARCH_TLS",
	})
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	tr.MaxIdleConnsPerHost = 16
	cl, err := opensearchapi.NewClient(opensearchapi.Config{Client: osgo.Config{
		Addresses:      c.URLs,
		Username:       c.Username,
		Password:       c.Password,
		Transport:      tr,
		RequestTimeout: c.Timeout,
	}})
	if err != nil {
		return nil, fmt.Errorf("opensearch client: %w", err)
	}
	if err := Check(ctx, cl, c); err != nil {
		return nil, err
	}
	return cl, nil
}

// Check asks the cluster for its root endpoint and explains what failed.
func Check(ctx context.Context, cl *opensearchapi.Client, c Config) error {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	status, body, err := Raw(ctx, cl, http.MethodGet, "/", nil)
	urls := redactURLs(c.URLs)
	var (
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		alert   tls.AlertError
		recErr  tls.RecordHeaderError
	)
	switch {
	case err != nil && (errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host)):
		return fmt.Errorf("opensearch: TLS: the certificate of %s is not trusted (%v): set STACKSTREAM_OPENSEARCH_TLS_CA_FILE to the CA that signed it", urls, redactErr(err, c))
	case err != nil && (errors.As(err, &alert) || tlsconfig.IsRemoteAlert(err)):
		return fmt.Errorf("opensearch: TLS: %s refused the handshake (%v)", urls, redactErr(err, c))
	case err != nil && errors.As(err, &recErr):
		return fmt.Errorf("opensearch: TLS: %s does not speak TLS (%v): use http:// in STACKSTREAM_OPENSEARCH_URL", urls, redactErr(err, c))
	case err != nil:
		return fmt.Errorf("opensearch: no answer at STACKSTREAM_OPENSEARCH_URL=%s (%v): start OpenSearch or fix the URL", urls, redactErr(err, c))
	case status == http.StatusUnauthorized:
		return fmt.Errorf("opensearch: %s rejected the credentials of user %q (HTTP 401): fix STACKSTREAM_OPENSEARCH_USERNAME/STACKSTREAM_OPENSEARCH_PASSWORD", urls, c.user())
	case status == http.StatusForbidden:
		return fmt.Errorf("opensearch: %s accepted user %q but denies it cluster:monitor/main (HTTP 403): give the user's role that permission", urls, c.user())
	case status == http.StatusBadRequest && bytes.Contains(body, []byte("plain HTTP request was sent to HTTPS port")):
		return fmt.Errorf("opensearch: %s expects https:// (HTTP 400): fix STACKSTREAM_OPENSEARCH_URL", urls)
	case status != http.StatusOK:
		return fmt.Errorf("opensearch: %s answered HTTP %d: %s", urls, status, truncate(body, 200))
	}
	return nil
}

// user is the basic-auth user, from the settings or else a URL's userinfo.
func (c Config) user() string {
	if c.Username != "" {
		return c.Username
	}
	for _, raw := range c.URLs {
		if u, err := url.Parse(raw); err == nil && u.User != nil {
			return u.User.Username()
		}
	}
	return ""
}

// redactErr is err's text without the URLs' userinfo or the password: a
// transport error quotes the request URL, and net/http masks only the
// password part of it.
func redactErr(err error, c Config) string {
	s := err.Error()
	for _, raw := range c.URLs {
		if u, perr := url.Parse(raw); perr == nil && u.User != nil {
			s = strings.ReplaceAll(s, u.User.String()+"@", "***@")
			s = strings.ReplaceAll(s, u.User.Username()+":***@", "***@")
			s = strings.ReplaceAll(s, u.User.Username()+"@", "***@")
			if pw, ok := u.User.Password(); ok && pw != "" {
				s = strings.ReplaceAll(s, pw, "***")
			}
		}
	}
	if c.Password != "" {
		s = strings.ReplaceAll(s, c.Password, "***")
	}
	return s
}

// Raw performs a request with a JSON body (nil for none) and returns the
// status and body. Transport errors are returned as err; HTTP errors are not.
func Raw(ctx context.Context, cl *opensearchapi.Client, method, path string, body []byte) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, r)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := cl.Client.Perform(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// StoreBytes is the bytes on disk of the primaries of the indices pattern
// names (their store stats: cached by OpenSearch for
// index.store.stats_refresh_interval, 10 s by default, after a change).
func StoreBytes(ctx context.Context, cl *opensearchapi.Client, pattern string) (int64, error) {
	status, body, err := Raw(ctx, cl, http.MethodGet, "/"+pattern+"/_stats/store", nil)
	if err != nil || status != http.StatusOK {
		return 0, fmt.Errorf("store stats of %s: %d %v %.300s", pattern, status, err, body)
	}
	var s struct {
		All struct {
			Primaries struct {
				Store struct {
					Bytes int64 `json:"size_in_bytes"`
				} `json:"store"`
			} `json:"primaries"`
		} `json:"_all"`
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return 0, fmt.Errorf("store stats of %s: %w", pattern, err)
	}
	return s.All.Primaries.Store.Bytes, nil
}

// TemplateResult says what ApplyTemplates did with one template.
type TemplateResult struct {
	Name   string
	Action string // "created", "updated" or "unchanged"
}

// ApplyTemplates puts the index templates for the names under prefix, leaving a template alone when the
// stored one carries the same checksum, so repeated runs change nothing.
func ApplyTemplates(ctx context.Context, cl *opensearchapi.Client, prefix string, s indices.Settings) ([]TemplateResult, error) {
	tpls, err := indices.Names{Prefix: prefix}.Templates(s)
	if err != nil {
		return nil, err
	}
	out := make([]TemplateResult, 0, len(tpls))
	for _, t := range tpls {
		sum := sha256.Sum256(t.Body)
		checksum := hex.EncodeToString(sum[:8])
		status, body, err := Raw(ctx, cl, http.MethodGet, "/_index_template/"+t.Name, nil)
		if err != nil {
			return out, fmt.Errorf("get index template %s: %w", t.Name, err)
		}
		action := "created"
		if status == http.StatusOK {
			if storedChecksum(body) == checksum {
				out = append(out, TemplateResult{Name: t.Name, Action: "unchanged"})
				continue
			}
			action = "updated"
		}
		withSum, err := setChecksum(t.Body, checksum)
		if err != nil {
			return out, err
		}
		status, body, err = Raw(ctx, cl, http.MethodPut, "/_index_template/"+t.Name, withSum)
		if err != nil {
			return out, fmt.Errorf("put index template %s: %w", t.Name, err)
		}
		if status != http.StatusOK {
			return out, fmt.Errorf("put index template %s: HTTP %d: %s", t.Name, status, truncate(body, 500))
		}
		if err := upgradeMappings(ctx, cl, t); err != nil {
			return out, err
		}
		out = append(out, TemplateResult{Name: t.Name, Action: action})
	}
	return out, nil
}

// upgradeMappings puts a new or changed template's mappings on the indices
// it already matches: a template applies only to indices created after it,
// and today's index must take the new fields too. Only additions: a field an
// index already has keeps its definition there, since OpenSearch refuses to
// change most of a field's parameters (index, doc_values, type); such a
// change applies to the indices created after it, and to existing data
// after stackctl reindex. Objects an index has are descended into, their
// own parameters (dynamic) put as the template has them.
func upgradeMappings(ctx context.Context, cl *opensearchapi.Client, t indices.Template) error {
	var tpl struct {
		Patterns []string `json:"index_patterns"`
		Template struct {
			Mappings map[string]any `json:"mappings"`
		} `json:"template"`
	}
	if err := json.Unmarshal(t.Body, &tpl); err != nil {
		return fmt.Errorf("parse template %s: %w", t.Name, err)
	}
	if len(tpl.Template.Mappings) == 0 {
		return nil
	}
	path := "/" + strings.Join(tpl.Patterns, ",") + "/_mapping?allow_no_indices=true&ignore_unavailable=true"
	status, body, err := Raw(ctx, cl, http.MethodGet, path, nil)
	if err != nil || status != http.StatusOK {
		return fmt.Errorf("read mappings of existing %s indices: HTTP %d: %s %v", t.Name, status, truncate(body, 500), err)
	}
	var existing map[string]struct {
		Mappings map[string]any `json:"mappings"`
	}
	if err := json.Unmarshal(body, &existing); err != nil {
		return fmt.Errorf("read mappings of existing %s indices: %w", t.Name, err)
	}
	for index, have := range existing {
		add, err := json.Marshal(mappingAdditions(tpl.Template.Mappings, have.Mappings))
		if err != nil {
			return err
		}
		status, body, err := Raw(ctx, cl, http.MethodPut, "/"+index+"/_mapping", add)
		if err != nil {
			return fmt.Errorf("update mapping of %s: %w", index, err)
		}
		if status != http.StatusOK {
			return fmt.Errorf("update mapping of %s: HTTP %d: %s", index, status, truncate(body, 500))
		}
	}
	return nil
}

// mappingAdditions is the mapping tpl without the fields have already
// holds: a field have has is left out, an object (a field with properties)
// have has is descended into. _source is left out too: an index keeps the
// _source it was created with (OpenSearch refuses to change its excludes),
// so an index created before the rollups' excludes keeps its stacks in
// _source, which readers of doc values and stackctl reindex read alike.
func mappingAdditions(tpl, have map[string]any) map[string]any {
	out := make(map[string]any, len(tpl))
	for k, v := range tpl {
		if k == "_source" {
			continue
		}
		props, ok := v.(map[string]any)
		if k != "properties" || !ok {
			out[k] = v
			continue
		}
		haveProps, _ := have["properties"].(map[string]any)
		add := map[string]any{}
		for name, def := range props {
			old, exists := haveProps[name].(map[string]any)
			d, _ := def.(map[string]any)
			switch _, object := d["properties"]; {
			case !exists:
				add[name] = def
			case object:
				add[name] = mappingAdditions(d, old)
			}
		}
		out[k] = add
	}
	return out
}

// RemovePrefix deletes every index and the templates under prefix: the
// undo of ApplyTemplates plus what was written, for tests and benchmarks that
// share a cluster under their own prefix. It returns the first error.
func RemovePrefix(ctx context.Context, cl *opensearchapi.Client, prefix string) error {
	paths := []string{"/" + prefix + "*?expand_wildcards=all&allow_no_indices=true"}
	for _, name := range (indices.Names{Prefix: prefix}).TemplateNames() {
		paths = append(paths, "/_index_template/"+name)
	}
	var firstErr error
	for _, p := range paths {
		if _, _, err := Raw(ctx, cl, http.MethodDelete, p, nil); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("delete %s: %w", p, err)
		}
	}
	return firstErr
}

func setChecksum(body []byte, checksum string) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	meta, _ := doc["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta["checksum"] = checksum
	doc["_meta"] = meta
	return json.Marshal(doc)
}

func storedChecksum(body []byte) string {
	var resp struct {
		IndexTemplates []struct {
			IndexTemplate struct {
				Meta struct {
					Checksum string `json:"checksum"`
				} `json:"_meta"`
			} `json:"index_template"`
		} `json:"index_templates"`
	}
	if json.Unmarshal(body, &resp) != nil || len(resp.IndexTemplates) == 0 {
		return ""
	}
	return resp.IndexTemplates[0].IndexTemplate.Meta.Checksum
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// Storage is read from STACKSTREAM_OPENSEARCH_* and
// STACKSTREAM_OPENSEARCH_INDEX_* when embedded in a service's Config.
type Storage struct {
	OpenSearch Config      `envconfig:"OPENSEARCH"`
	Index      IndexConfig `envconfig:"OPENSEARCH_INDEX"`
}

// Validate checks the connection and the index settings.
func (s Storage) Validate() error {
	if err := s.OpenSearch.Validate(); err != nil {
		return err
	}
	return s.Index.Validate()
}

// IndexConfig is the index naming and settings shared by writers, read from
// STACKSTREAM_OPENSEARCH_INDEX_* when embedded as `Index opensearch.IndexConfig `envconfig:"OPENSEARCH_INDEX"“.
type IndexConfig struct {
	Prefix          string `envconfig:"PREFIX" default:"stackstream-" desc:"prefix of every index and template name"`
	Shards          int    `envconfig:"SHARDS" default:"1" desc:"primary shards per index"`
	Replicas        int    `envconfig:"REPLICAS" default:"0" desc:"replicas per index"`
	RefreshInterval string `envconfig:"REFRESH_INTERVAL" default:"5s" desc:"index refresh interval"`
	Generation      int    `envconfig:"GENERATION" default:"0" desc:"indexer and rollup: 0 writes through the serving index names; N >= 1 writes into index generation N only (the temporary consumers of stackctl reindex); readers always read the serving names"`
}

// Validate checks values that parse but cannot work.
func (c IndexConfig) Validate() error {
	switch {
	case c.Shards < 1:
		return fmt.Errorf("STACKSTREAM_OPENSEARCH_INDEX_SHARDS=%d must be at least 1", c.Shards)
	case c.Replicas < 0:
		return fmt.Errorf("STACKSTREAM_OPENSEARCH_INDEX_REPLICAS=%d must be 0 or more", c.Replicas)
	case c.Generation < 0:
		return fmt.Errorf("STACKSTREAM_OPENSEARCH_INDEX_GENERATION=%d must be 0 (follow the serving generation) or a generation number", c.Generation)
	}
	return nil
}

// ReindexGroup is the temporary consumer group that fills generation gen
// in place of the live group live (stackctl reindex).
func ReindexGroup(live string, gen int) string { return live + ".reindex-g" + strconv.Itoa(gen) }

// CheckGroup refuses a consumer group (read from groupVar) that cannot go
// with Generation: a process pinned to a generation must use the temporary
// group stackctl reindex named, or it would take partitions from the live
// consumers and write their records where no reader looks.
func (c IndexConfig) CheckGroup(groupVar, group string) error {
	if c.Generation > 0 && !strings.HasSuffix(group, ReindexGroup("", c.Generation)) {
		return fmt.Errorf("STACKSTREAM_OPENSEARCH_INDEX_GENERATION=%d needs the temporary group stackctl reindex prints (ending in %s), but %s=%s: set it, or the process takes partitions from that group's live consumers",
			c.Generation, ReindexGroup("", c.Generation), groupVar, group)
	}
	return nil
}

// Names are the index names under the prefix.
func (c IndexConfig) Names() indices.Names { return indices.Names{Prefix: c.Prefix} }

// Settings are the template settings.
func (c IndexConfig) Settings() indices.Settings {
	return indices.Settings{Shards: c.Shards, Replicas: c.Replicas, RefreshInterval: c.RefreshInterval}
}

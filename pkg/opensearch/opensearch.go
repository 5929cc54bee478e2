// Package opensearch builds opensearch-go clients from configuration and
// applies the index templates of schemas/indices.
package opensearch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
	Timeout               time.Duration `envconfig:"TIMEOUT" default:"30s" desc:"per-request timeout"`
}

// Validate checks values that parse but cannot work.
func (c Config) Validate() error {
	if len(c.URLs) == 0 || c.URLs[0] == "" {
		return fmt.Errorf("STACKSTREAM_OPENSEARCH_URL is empty: set it to a node URL such as http://127.0.0.1:9200")
	}
	for _, u := range c.URLs {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("STACKSTREAM_OPENSEARCH_URL: %q must start with http:// or https://", u)
		}
	}
	return nil
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
	switch {
	case err != nil:
		return fmt.Errorf("opensearch: no answer at STACKSTREAM_OPENSEARCH_URL=%s (%v): start OpenSearch or fix the URL", strings.Join(c.URLs, ","), err)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return fmt.Errorf("opensearch: %s rejected the credentials of STACKSTREAM_OPENSEARCH_USERNAME=%q (HTTP %d): fix STACKSTREAM_OPENSEARCH_USERNAME/STACKSTREAM_OPENSEARCH_PASSWORD", strings.Join(c.URLs, ","), c.Username, status)
	case status != http.StatusOK:
		return fmt.Errorf("opensearch: %s answered HTTP %d: %s", strings.Join(c.URLs, ","), status, truncate(body, 200))
	}
	return nil
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
// and today's index must take the new fields too. Only additions are
// possible (OpenSearch refuses to change a field's type); schema changes are
// made of additions for that reason.
func upgradeMappings(ctx context.Context, cl *opensearchapi.Client, t indices.Template) error {
	var tpl struct {
		Patterns []string `json:"index_patterns"`
		Template struct {
			Mappings json.RawMessage `json:"mappings"`
		} `json:"template"`
	}
	if err := json.Unmarshal(t.Body, &tpl); err != nil {
		return fmt.Errorf("parse template %s: %w", t.Name, err)
	}
	if len(tpl.Template.Mappings) == 0 {
		return nil
	}
	path := "/" + strings.Join(tpl.Patterns, ",") + "/_mapping?allow_no_indices=true&ignore_unavailable=true"
	status, body, err := Raw(ctx, cl, http.MethodPut, path, tpl.Template.Mappings)
	if err != nil {
		return fmt.Errorf("update mappings of existing %s indices: %w", t.Name, err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("update mappings of existing %s indices: HTTP %d: %s", t.Name, status, truncate(body, 500))
	}
	return nil
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

// IndexConfig is the index naming and settings shared by writers, read from
// STACKSTREAM_OPENSEARCH_INDEX_* when embedded as `Index opensearch.IndexConfig `envconfig:"OPENSEARCH_INDEX"“.
type IndexConfig struct {
	Prefix          string `envconfig:"PREFIX" default:"stackstream-" desc:"prefix of every index and template name"`
	Shards          int    `envconfig:"SHARDS" default:"1" desc:"primary shards per index"`
	Replicas        int    `envconfig:"REPLICAS" default:"0" desc:"replicas per index"`
	RefreshInterval string `envconfig:"REFRESH_INTERVAL" default:"5s" desc:"index refresh interval"`
}

// Names are the index names under the prefix.
func (c IndexConfig) Names() indices.Names { return indices.Names{Prefix: c.Prefix} }

// Settings are the template settings.
func (c IndexConfig) Settings() indices.Settings {
	return indices.Settings{Shards: c.Shards, Replicas: c.Replicas, RefreshInterval: c.RefreshInterval}
}

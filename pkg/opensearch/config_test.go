package opensearch

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestValidateSecurity: basic auth over http:// may only go to loopback
// unless explicitly allowed; errors name the variables and never show the
// password or a URL's userinfo.
func TestValidateSecurity(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none for a valid config
	}{
		{"auth over http to another host", Config{URLs: []string{"http://search.example:9200"}, Username: "u", Password: "s3cret-pw"},
			[]string{"STACKSTREAM_OPENSEARCH_URL=http://search.example:9200", "https://", "STACKSTREAM_OPENSEARCH_ALLOW_PLAINTEXT_AUTH=true"}},
		{"userinfo over http to another host", Config{URLs: []string{"http://u:s3cret-pw@10.0.0.7:9200"}},
			[]string{"STACKSTREAM_OPENSEARCH_URL=http://***@10.0.0.7:9200", "STACKSTREAM_OPENSEARCH_ALLOW_PLAINTEXT_AUTH"}},
		{"second url over http", Config{URLs: []string{"https://a:9200", "http://b:9200"}, Username: "u", Password: "p"},
			[]string{"http://b:9200"}},
		{"auth over http allowed", Config{URLs: []string{"http://search.example:9200"}, Username: "u", Password: "p", AllowPlaintextAuth: true}, nil},
		{"auth over https", Config{URLs: []string{"https://search.example:9200"}, Username: "u", Password: "p"}, nil},
		{"auth over http to 127.0.0.1", Config{URLs: []string{"http://127.0.0.1:9200"}, Username: "u", Password: "p"}, nil},
		{"auth over http to 127.0.0.2", Config{URLs: []string{"http://127.0.0.2:9200"}, Username: "u", Password: "p"}, nil},
		{"auth over http to ::1", Config{URLs: []string{"http://[::1]:9200"}, Username: "u", Password: "p"}, nil},
		{"auth over http to localhost", Config{URLs: []string{"http://LocalHost:9200"}, Username: "u", Password: "p"}, nil},
		{"no auth over http", Config{URLs: []string{"http://search.example:9200"}}, nil},
		{"password without user", Config{URLs: []string{"https://a:9200"}, Password: "s3cret-pw"},
			[]string{"STACKSTREAM_OPENSEARCH_USERNAME is empty"}},
		{"unparsable url with userinfo", Config{URLs: []string{"https://u:s3cret-pw@a:9200/%zz"}},
			[]string{"STACKSTREAM_OPENSEARCH_URL", "not a valid URL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want an error with %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v, want %q in it", err, w)
				}
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "u:") {
				t.Errorf("Validate = %v: shows the credentials", err)
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://u:p@h:9200/x":  "https://***@h:9200/x",
		"https://u@h:9200":      "https://***@h:9200",
		"http://h:9200":         "http://h:9200",
		"https://u:p@h:9200/%z": "https://***@h:9200/%z",
		"u:p@h":                 "***@h",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestConfigPrintsNoSecrets: %v, %+v, %#v and slog of a config (alone or
// inside a service's) show neither the password nor a URL's userinfo.
func TestConfigPrintsNoSecrets(t *testing.T) {
	c := Config{URLs: []string{"https://bob:url-s3cret@h:9200"}, Username: "alice", Password: "s3cret-pw"}
	outer := struct{ OpenSearch Config }{c}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "opensearch", c)
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "opensearch", c)
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprintf("%+v", outer), logged.String()} {
		for _, secret := range []string{"s3cret-pw", "url-s3cret", "bob"} {
			if strings.Contains(s, secret) {
				t.Errorf("printed config shows %q: %s", secret, s)
			}
		}
		if !strings.Contains(s, "alice") || !strings.Contains(s, "https://***@h:9200") {
			t.Errorf("printed config lost the user name or the host: %s", s)
		}
	}
}

// TestUnreachableWithUserinfo: the error for a node that does not answer
// names the URL without its userinfo.
func TestUnreachableWithUserinfo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := NewClient(ctx, Config{URLs: []string{"http://bob:url-s3cret@127.0.0.1:1"}, Timeout: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "STACKSTREAM_OPENSEARCH_URL=http://***@127.0.0.1:1") {
		t.Fatalf("NewClient error = %v, want one naming the redacted URL", err)
	}
	if strings.Contains(err.Error(), "url-s3cret") || strings.Contains(err.Error(), "bob") {
		t.Fatalf("NewClient error = %v: shows the userinfo", err)
	}
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stackstream/stackstream/pkg/config"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("# tenants\nteam-a:secret-a\n\nbare-token\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("# nothing\n"), 0o600)
	tests := []struct {
		name string
		env  map[string]string
		want string // error prefix after "config: "; "" for none
	}{
		{"defaults", nil, ""},
		{"tokens", map[string]string{"STACKSTREAM_INGEST_TOKENS": "a:t1, t2"}, ""},
		{"tokens file", map[string]string{"STACKSTREAM_INGEST_TOKENS_FILE": tokens}, ""},
		{"empty token", map[string]string{"STACKSTREAM_INGEST_TOKENS": "a:"}, "STACKSTREAM_INGEST_TOKENS: entry 1: the token is empty"},
		{"empty tenant", map[string]string{"STACKSTREAM_INGEST_TOKENS": "x,:zq9x"}, "STACKSTREAM_INGEST_TOKENS: entry 2: the tenant before : is empty"},
		{"token for two tenants", map[string]string{"STACKSTREAM_INGEST_TOKENS": "a:zq9x,b:zq9x"}, "STACKSTREAM_INGEST_TOKENS: entry 2: the same token"},
		{"missing file", map[string]string{"STACKSTREAM_INGEST_TOKENS_FILE": filepath.Join(dir, "nope")}, "STACKSTREAM_INGEST_TOKENS_FILE: open"},
		{"file without tokens", map[string]string{"STACKSTREAM_INGEST_TOKENS_FILE": empty}, "STACKSTREAM_INGEST_TOKENS_FILE=" + empty + " holds no token"},
		{"basic without password", map[string]string{"STACKSTREAM_INGEST_BASIC_AUTH_USER": "u"}, "set both STACKSTREAM_INGEST_BASIC_AUTH_USER"},
		{"body limit", map[string]string{"STACKSTREAM_INGEST_MAX_BODY_BYTES": "10"}, "STACKSTREAM_INGEST_MAX_BODY_BYTES=10"},
		{"body limit not a number", map[string]string{"STACKSTREAM_INGEST_MAX_BODY_BYTES": "16MiB"}, `STACKSTREAM_INGEST_MAX_BODY_BYTES="16MiB" is not a valid`},
		{"record size", map[string]string{"STACKSTREAM_INGEST_MAX_RECORD_BYTES": "100"}, "STACKSTREAM_INGEST_MAX_RECORD_BYTES=100"},
		{"produce timeout", map[string]string{"STACKSTREAM_INGEST_PRODUCE_TIMEOUT": "10ms"}, "STACKSTREAM_INGEST_PRODUCE_TIMEOUT=10ms"},
		{"read budget", map[string]string{"STACKSTREAM_INGEST_MAX_READ_BYTES": "1024"}, "STACKSTREAM_INGEST_MAX_READ_BYTES=1024 is below"},
		{"buffer", map[string]string{"STACKSTREAM_INGEST_BUFFER_BYTES": "1000"}, "STACKSTREAM_INGEST_BUFFER_BYTES=1000"},
		{"listen", map[string]string{"STACKSTREAM_INGEST_LISTEN_ADDR": " "}, "STACKSTREAM_INGEST_LISTEN_ADDR is empty"},
		{"kafka", map[string]string{"STACKSTREAM_KAFKA_BROKERS": "nohost"}, "STACKSTREAM_KAFKA_BROKERS"},
		{"otlp off", map[string]string{"STACKSTREAM_INGEST_OTLP_GRPC_ADDR": "off", "STACKSTREAM_INGEST_OTLP_HTTP_ADDR": "off"}, ""},
		{"otlp grpc not host:port", map[string]string{"STACKSTREAM_INGEST_OTLP_GRPC_ADDR": "4317"}, `STACKSTREAM_INGEST_OTLP_GRPC_ADDR="4317" is not host:port`},
		{"otlp http on the listen port", map[string]string{"STACKSTREAM_INGEST_OTLP_HTTP_ADDR": "127.0.0.1:4040"}, `STACKSTREAM_INGEST_OTLP_HTTP_ADDR="127.0.0.1:4040" is STACKSTREAM_INGEST_LISTEN_ADDR too`},
		{"otlp both on one port", map[string]string{"STACKSTREAM_INGEST_OTLP_HTTP_ADDR": "127.0.0.1:4317"}, "STACKSTREAM_INGEST_OTLP_GRPC_ADDR and STACKSTREAM_INGEST_OTLP_HTTP_ADDR are both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Chdir(t.TempDir()) // no .env
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var c Config
			err := config.Load(&c, nil, nil)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), "config: "+tt.want) {
				t.Fatalf("Load error = %v, want prefix %q", err, tt.want)
			}
			for _, secret := range []string{"zq9x"} {
				if strings.Contains(tt.env["STACKSTREAM_INGEST_TOKENS"], secret) && strings.Contains(err.Error(), secret) {
					t.Errorf("error shows the token: %v", err)
				}
			}
		})
	}
}

func TestReadTokens(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "tokens")
	os.WriteFile(f, []byte("team-a:secret-a\nbare\n"), 0o600)
	got, err := Ingest{Tokens: "b:tb", TokensFile: f}.ReadTokens()
	if err != nil {
		t.Fatal(err)
	}
	want := []Token{{"b", "tb"}, {"team-a", "secret-a"}, {"", "bare"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("tokens = %v, want %v", got, want)
	}
}

func TestStringRedacts(t *testing.T) {
	in := Ingest{Tokens: "a:supersecret", BasicAuthUser: "u", BasicAuthPass: "hunter2"}
	for _, s := range []string{fmt.Sprint(in), fmt.Sprintf("%+v", Config{Ingest: in})} {
		if strings.Contains(s, "supersecret") || strings.Contains(s, "hunter2") {
			t.Fatalf("printed config shows a secret: %s", s)
		}
	}
}

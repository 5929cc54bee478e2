package tlsconfig

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBuildErrorsNameTheVariable(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"missing CA file", Config{Enabled: true, CAFile: filepath.Join(dir, "absent.pem")}, "STACKSTREAM_X_TLS_CA_FILE: read"},
		{"CA file without PEM", Config{Enabled: true, CAFile: notPEM}, "STACKSTREAM_X_TLS_CA_FILE: " + notPEM + " holds no PEM certificate"},
		{"certificate without key", Config{Enabled: true, CertFile: notPEM}, "STACKSTREAM_X_TLS_CERT_FILE/STACKSTREAM_X_TLS_KEY_FILE: load key pair"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.VarPrefix = "STACKSTREAM_X_TLS"
			if _, err := Build(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Build = %v, want %q", err, tt.want)
			}
		})
	}
	if tc, err := Build(Config{CAFile: notPEM}); tc != nil || err != nil {
		t.Fatalf("Build of a disabled config = %v, %v; want nil, nil", tc, err)
	}
}

func TestIsRemoteAlert(t *testing.T) {
	remote := &net.OpError{Op: "remote error", Net: "tcp", Err: errors.New("tls: bad certificate")}
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{remote, true},
		{fmt.Errorf("dial broker: %w", remote), true},
		{errors.New("unable to dial: remote error: tls: unknown certificate authority"), true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, false},
		{errors.New("EOF"), false},
		{nil, false},
	} {
		if got := IsRemoteAlert(tt.err); got != tt.want {
			t.Errorf("IsRemoteAlert(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

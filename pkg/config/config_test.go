package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

type spec struct {
	Interval time.Duration `envconfig:"INTERVAL" default:"10s" desc:"how often"`
	Brokers  []string      `envconfig:"BROKERS" default:"127.0.0.1:9092"`
	Port     int           `envconfig:"PORT" default:"8080"`
}

func (s *spec) Validate() error {
	if s.Port <= 0 {
		return fmt.Errorf("STACKSTREAM_PORT=%d must be positive", s.Port)
	}
	return nil
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"defaults", nil, ""},
		{"malformed duration", map[string]string{"STACKSTREAM_INTERVAL": "ten"}, `config: STACKSTREAM_INTERVAL="ten" is not a valid time.Duration`},
		{"malformed int", map[string]string{"STACKSTREAM_PORT": "x"}, `config: STACKSTREAM_PORT="x" is not a valid int`},
		{"validation", map[string]string{"STACKSTREAM_PORT": "-1"}, "config: STACKSTREAM_PORT=-1 must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var s spec
			err := Load(&s, nil, nil)
			if tt.wantErr == "" {
				if err != nil || s.Interval != 10*time.Second || s.Brokers[0] != "127.0.0.1:9092" {
					t.Fatalf("Load = %+v, %v", s, err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("Load error = %v, want prefix %q", err, tt.wantErr)
			}
		})
	}
}

func TestDotEnv(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	os.WriteFile(".env", []byte("STACKSTREAM_PORT=9000\nSTACKSTREAM_INTERVAL=5s\n"), 0o644)
	t.Setenv("STACKSTREAM_INTERVAL", "7s") // the environment wins
	os.Unsetenv("STACKSTREAM_PORT")
	t.Cleanup(func() { os.Unsetenv("STACKSTREAM_PORT") })
	var s spec
	if err := Load(&s, nil, nil); err != nil {
		t.Fatal(err)
	}
	if s.Port != 9000 || s.Interval != 7*time.Second {
		t.Fatalf("got %+v", s)
	}
}

func TestHelp(t *testing.T) {
	var out bytes.Buffer
	var s spec
	if err := Load(&s, []string{"-h"}, &out); !errors.Is(err, ErrHelp) {
		t.Fatalf("Load(-h) = %v", err)
	}
	for _, want := range []string{"STACKSTREAM_INTERVAL", "10s", "how often", "STACKSTREAM_BROKERS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}

package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
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

// flagSpec is a command's settings that flags can override.
type flagSpec struct {
	Frequency int `envconfig:"FREQUENCY" default:"19" desc:"samples per second"`
}

func (s *flagSpec) Validate() error {
	if s.Frequency < 1 || s.Frequency > 1000 {
		return fmt.Errorf("STACKSTREAM_FREQUENCY=%d: use 1 to 1000", s.Frequency)
	}
	return nil
}

func (s *flagSpec) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&s.Frequency, "frequency", s.Frequency, "samples per second (STACKSTREAM_FREQUENCY)")
	return fs
}

func TestLoadWithFlags(t *testing.T) {
	tests := []struct {
		name    string
		env     string // STACKSTREAM_FREQUENCY, "" unset
		args    []string
		want    int
		wantErr string
	}{
		{"default", "", nil, 19, ""},
		{"variable", "99", nil, 99, ""},
		{"flag over variable", "99", []string{"-frequency", "7"}, 7, ""},
		// The variable alone would be refused: the flag replaces it, and the
		// check runs once, on the value the command will use.
		{"valid flag replaces bad variable", "0", []string{"-frequency", "7"}, 7, ""},
		{"bad variable without flag", "0", nil, 0, "config: STACKSTREAM_FREQUENCY=0: use 1 to 1000"},
		{"bad flag over valid variable", "99", []string{"-frequency", "5000"}, 0, "config: STACKSTREAM_FREQUENCY=5000: use 1 to 1000"},
		{"unknown flag", "", []string{"-nope"}, 0, "flag provided but not defined: -nope"},
		// Not even a number: the flag still replaces it.
		{"flag replaces unparsable variable", "abc", []string{"-frequency", "7"}, 7, ""},
		{"unparsable variable without flag", "abc", nil, 0, `config: STACKSTREAM_FREQUENCY="abc" is not a valid int`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("STACKSTREAM_FREQUENCY", tt.env)
			}
			var s flagSpec
			err := LoadWithFlags(&s, tt.args, io.Discard, s.flags)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("LoadWithFlags = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || s.Frequency != tt.want {
				t.Fatalf("LoadWithFlags: frequency %d, %v; want %d", s.Frequency, err, tt.want)
			}
		})
	}
}

func TestLoadWithFlagsHelpListsFlags(t *testing.T) {
	var s flagSpec
	var out bytes.Buffer
	if err := LoadWithFlags(&s, []string{"--help"}, &out, s.flags); !errors.Is(err, ErrHelp) {
		t.Fatalf("--help = %v, want ErrHelp", err)
	}
	for _, want := range []string{"STACKSTREAM_FREQUENCY", "Flags (override the variables):", "-frequency"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}

type okBlock struct{}

func (okBlock) Validate() error { return nil }

type badBlock string

func (b badBlock) Validate() error { return errors.New(string(b)) }

func TestValidateAllReturnsFirstError(t *testing.T) {
	if err := ValidateAll(okBlock{}, okBlock{}); err != nil {
		t.Fatal(err)
	}
	if err := ValidateAll(okBlock{}, badBlock("STACKSTREAM_A"), badBlock("STACKSTREAM_B")); err == nil || err.Error() != "STACKSTREAM_A" {
		t.Fatalf("ValidateAll = %v, want the first block's error", err)
	}
}

package main

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/config"
)

func TestParseLoadgen(t *testing.T) {
	c, err := parseLoadgen([]string{"--hosts", "500", "--cores", "16", "--interval", "15s", "--speed", "4", "--seed", "7"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Hosts != 500 || c.Cores != 16 || c.Interval != 15*time.Second || c.Speed != 4 || c.Seed != 7 || c.Rate != 19 {
		t.Fatalf("parsed %+v", c)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--hosts", "-1"}, "--hosts=-1"},
		{[]string{"--rate", "abc"}, "invalid value"},
		{[]string{"--nope"}, "not defined"},
		{[]string{"500"}, `unexpected argument "500"`},
		{[]string{"--duration", "8d"}, "invalid value"},
		{[]string{"--duration", "200h"}, "--duration"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			if _, err := parseLoadgen(tt.args, io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("parseLoadgen(%q) = %v, want an error saying %q", tt.args, err, tt.want)
			}
		})
	}
	if _, err := parseLoadgen([]string{"-h"}, io.Discard); !errors.Is(err, config.ErrHelp) {
		t.Fatalf("-h: %v, want config.ErrHelp", err)
	}
}

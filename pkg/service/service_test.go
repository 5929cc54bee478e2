package service

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/telemetry"
)

func TestGroupStopsOnSignalAndNamesIt(t *testing.T) {
	var logs bytes.Buffer
	g := NewGroup(slog.New(slog.NewTextHandler(&logs, nil)))
	interrupted := make(chan struct{})
	g.AddContext(context.Background(), func(ctx context.Context) error {
		<-ctx.Done()
		close(interrupted)
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- g.Run() }()
	time.Sleep(50 * time.Millisecond) // let the actors start (no timing is asserted)
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after SIGTERM = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after SIGTERM")
	}
	<-interrupted
	for _, want := range []string{`msg="stopping on signal" signal=terminated`, "msg=stopped signal=terminated"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), "<nil>") {
		t.Errorf("logs name no signal:\n%s", logs.String())
	}
}

func TestGroupReturnsFirstError(t *testing.T) {
	var logs bytes.Buffer
	g := NewGroup(slog.New(slog.NewTextHandler(&logs, nil)))
	boom := errors.New("boom")
	g.Add(func() error { return boom }, func(error) {})
	stopped := false
	g.AddContext(context.Background(), func(ctx context.Context) error {
		<-ctx.Done()
		stopped = true
		return nil
	})
	if err := g.Run(); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want boom", err)
	}
	if !stopped || !strings.Contains(logs.String(), "msg=stopped err=boom") {
		t.Fatalf("other actor stopped %v; logs:\n%s", stopped, logs.String())
	}
}

func TestBaseValidateNamesVariable(t *testing.T) {
	if err := (Base{Log: telemetry.LogConfig{Level: "info", Format: "json"}}).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		log  telemetry.LogConfig
		want string
	}{
		{telemetry.LogConfig{Level: "loud", Format: "text"}, "STACKSTREAM_LOG_LEVEL"},
		{telemetry.LogConfig{Level: "info", Format: "xml"}, "STACKSTREAM_LOG_FORMAT"},
	} {
		if err := (Base{Log: tc.log}).Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.log, err, tc.want)
		}
	}
}

type startConfig struct {
	Base
	Port int `envconfig:"TEST_START_PORT" default:"1"`
}

func (c startConfig) Validate() error {
	if err := c.Base.Validate(); err != nil {
		return err
	}
	if c.Port < 1 {
		return errors.New("STACKSTREAM_TEST_START_PORT must be positive")
	}
	return nil
}

func TestStart(t *testing.T) {
	t.Chdir(t.TempDir()) // no .env
	var cfg startConfig
	log, reg, err := Start("test", &cfg, nil)
	if err != nil || log == nil || reg == nil || cfg.Port != 1 || cfg.Log.Level != "info" {
		t.Fatalf("Start = %v, %v, %v; cfg %+v", log, reg, err, cfg)
	}
	for key, want := range map[string]string{"STACKSTREAM_TEST_START_PORT": "0", "STACKSTREAM_LOG_FORMAT": "xml"} {
		t.Run(key, func(t *testing.T) {
			t.Setenv(key, want)
			var cfg startConfig
			if _, _, err := Start("test", &cfg, nil); err == nil || !strings.Contains(err.Error(), key) {
				t.Fatalf("Start with %s=%s = %v, want an error naming it", key, want, err)
			}
		})
	}
}

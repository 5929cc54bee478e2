package kafka

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestValidateSecurity: settings that would send a secret in clear, or that
// would be ignored silently, stop start-up with a line naming the variables.
func TestValidateSecurity(t *testing.T) {
	base := func(mod func(*Config)) Config {
		c := Config{Brokers: []string{"kafka.example:9093"}}
		mod(&c)
		return c
	}
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none for a valid config
	}{
		{"plain without tls", base(func(c *Config) {
			c.SASLMechanism, c.SASLUsername, c.SASLPassword = "PLAIN", "u", "s3cret-plain"
		}), []string{"STACKSTREAM_KAFKA_SASL_MECHANISM=PLAIN", "STACKSTREAM_KAFKA_TLS=true", "STACKSTREAM_KAFKA_SASL_ALLOW_PLAINTEXT=true"}},
		{"plain lowercase without tls", base(func(c *Config) {
			c.SASLMechanism, c.SASLUsername, c.SASLPassword = "plain", "u", "s3cret-plain"
		}), []string{"STACKSTREAM_KAFKA_SASL_MECHANISM=PLAIN"}},
		{"plain without tls allowed", base(func(c *Config) {
			c.SASLMechanism, c.SASLUsername, c.SASLPassword, c.SASLAllowPlaintext = "PLAIN", "u", "p", true
		}), nil},
		{"plain with tls", base(func(c *Config) {
			c.SASLMechanism, c.SASLUsername, c.SASLPassword, c.TLS = "PLAIN", "u", "p", true
		}), nil},
		{"scram without tls", base(func(c *Config) {
			c.SASLMechanism, c.SASLUsername, c.SASLPassword = "SCRAM-SHA-512", "u", "p"
		}), nil},
		{"mechanism without user", base(func(c *Config) { c.SASLMechanism = "SCRAM-SHA-512" }),
			[]string{"STACKSTREAM_KAFKA_SASL_USERNAME"}},
		{"user without mechanism", base(func(c *Config) { c.SASLUsername, c.SASLPassword = "u", "s3cret-plain" }),
			[]string{"STACKSTREAM_KAFKA_SASL_MECHANISM is empty"}},
		{"ca file without tls", base(func(c *Config) { c.TLSCAFile = "/ca.pem" }),
			[]string{"STACKSTREAM_KAFKA_TLS_CA_FILE is set but STACKSTREAM_KAFKA_TLS is false"}},
		{"client cert without tls", base(func(c *Config) { c.TLSCertFile, c.TLSKeyFile = "/c.pem", "/k.pem" }),
			[]string{"STACKSTREAM_KAFKA_TLS_CERT_FILE"}},
		{"skip verify without tls", base(func(c *Config) { c.TLSInsecureSkipVerify = true }),
			[]string{"STACKSTREAM_KAFKA_TLS_INSECURE_SKIP_VERIFY"}},
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
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("Validate = %v: shows the password", err)
			}
		})
	}
}

// TestConfigPrintsNoPassword: %v, %+v, %#v and slog of a config (alone or
// inside a service's) never show the password.
func TestConfigPrintsNoPassword(t *testing.T) {
	c := Config{Brokers: []string{"b:1"}, SASLMechanism: "SCRAM-SHA-512", SASLUsername: "alice", SASLPassword: "s3cret-pw"}
	outer := struct{ Kafka Config }{c}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "kafka", c)
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "kafka", c)
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprintf("%+v", outer), fmt.Sprintf("%v", &c), logged.String()} {
		if strings.Contains(s, "s3cret-pw") {
			t.Errorf("printed config shows the password: %s", s)
		}
		if !strings.Contains(s, "alice") {
			t.Errorf("printed config lost the user name: %s", s)
		}
	}
}

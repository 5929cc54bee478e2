// Package kafka builds franz-go clients from configuration and holds the
// topic setup shared by stackctl and the tests.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/stackstream/stackstream/pkg/tlsconfig"
	"github.com/stackstream/stackstream/schemas/record"
)

// Config is the Kafka connection, read from STACKSTREAM_KAFKA_* when embedded
// as `Kafka kafka.Config `envconfig:"KAFKA"“.
type Config struct {
	Brokers               []string      `envconfig:"BROKERS" default:"127.0.0.1:9092" desc:"seed brokers, comma separated"`
	TopicPrefix           string        `envconfig:"TOPIC_PREFIX" default:"stackstream." desc:"prefix of every topic"`
	TLS                   bool          `envconfig:"TLS" default:"false" desc:"connect with TLS"`
	TLSCAFile             string        `envconfig:"TLS_CA_FILE" desc:"PEM CA bundle to verify brokers"`
	TLSCertFile           string        `envconfig:"TLS_CERT_FILE" desc:"client certificate (mTLS)"`
	TLSKeyFile            string        `envconfig:"TLS_KEY_FILE" desc:"client key (mTLS)"`
	TLSInsecureSkipVerify bool          `envconfig:"TLS_INSECURE_SKIP_VERIFY" default:"false"`
	SASLMechanism         string        `envconfig:"SASL_MECHANISM" desc:"PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty for none"`
	SASLUsername          string        `envconfig:"SASL_USERNAME"`
	SASLPassword          string        `envconfig:"SASL_PASSWORD" desc:"never logged"`
	DialTimeout           time.Duration `envconfig:"DIAL_TIMEOUT" default:"10s" desc:"how long start-up waits for a broker"`
}

// Topics returns the topic names under the configured prefix.
func (c Config) Topics() record.Topics { return record.TopicsFor(c.TopicPrefix) }

// Validate checks values that parse but cannot work.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 || c.Brokers[0] == "" {
		return errors.New("STACKSTREAM_KAFKA_BROKERS is empty: set it to host:port of at least one broker")
	}
	for _, b := range c.Brokers {
		if !strings.Contains(b, ":") {
			return fmt.Errorf("STACKSTREAM_KAFKA_BROKERS: %q lacks a port: use host:port", b)
		}
	}
	switch strings.ToUpper(c.SASLMechanism) {
	case "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		return fmt.Errorf("STACKSTREAM_KAFKA_SASL_MECHANISM=%q is not supported: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.SASLMechanism)
	}
	return nil
}

// Opts turns the connection settings into client options.
func (c Config) Opts() ([]kgo.Opt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.DialTimeout(c.DialTimeout)}
	tc, err := tlsconfig.Build(tlsconfig.Config{
		Enabled: c.TLS, CAFile: c.TLSCAFile, CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile,
		InsecureSkipVerify: c.TLSInsecureSkipVerify, VarPrefix: "STACKSTREAM_KAFKA_TLS",
	})
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	var mech sasl.Mechanism
	auth := scram.Auth{User: c.SASLUsername, Pass: c.SASLPassword}
	switch strings.ToUpper(c.SASLMechanism) {
	case "PLAIN":
		mech = plain.Auth{User: c.SASLUsername, Pass: c.SASLPassword}.AsMechanism()
	case "SCRAM-SHA-256":
		mech = auth.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		mech = auth.AsSha512Mechanism()
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

// NewClient builds a client with the connection settings plus extra, and
// checks that a broker answers within DialTimeout, so a wrong address stops
// start-up with a line naming the variable.
func NewClient(ctx context.Context, c Config, extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := c.Opts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	if err := Ping(ctx, cl, c); err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

// Ping checks that a broker answers.
func Ping(ctx context.Context, cl *kgo.Client, c Config) error {
	ctx, cancel := context.WithTimeout(ctx, c.DialTimeout)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka: no broker answered at STACKSTREAM_KAFKA_BROKERS=%s within %s (%v): start Kafka or fix the address", strings.Join(c.Brokers, ","), c.DialTimeout, err)
	}
	return nil
}

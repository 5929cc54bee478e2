// Package kafka builds franz-go clients from configuration and holds the
// topic setup shared by stackctl and the tests.
package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
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
	SASLAllowPlaintext    bool          `envconfig:"SASL_ALLOW_PLAINTEXT" default:"false" desc:"allow SASL PLAIN without TLS (sends the password in clear)"`
	DialTimeout           time.Duration `envconfig:"DIAL_TIMEOUT" default:"10s" desc:"how long start-up waits for a broker"`
}

// Connection is read from STACKSTREAM_KAFKA_* when embedded in a service's
// Config.
type Connection struct {
	Kafka Config `envconfig:"KAFKA"`
}

// Validate checks the connection settings.
func (c Connection) Validate() error { return c.Kafka.Validate() }

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
	mech := strings.ToUpper(c.SASLMechanism)
	switch mech {
	case "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		return fmt.Errorf("STACKSTREAM_KAFKA_SASL_MECHANISM=%q is not supported: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.SASLMechanism)
	}
	switch {
	case mech == "" && (c.SASLUsername != "" || c.SASLPassword != ""):
		return errors.New("STACKSTREAM_KAFKA_SASL_USERNAME/STACKSTREAM_KAFKA_SASL_PASSWORD are set but STACKSTREAM_KAFKA_SASL_MECHANISM is empty: set it to SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN")
	case mech != "" && c.SASLUsername == "":
		return fmt.Errorf("STACKSTREAM_KAFKA_SASL_MECHANISM=%s needs STACKSTREAM_KAFKA_SASL_USERNAME (and STACKSTREAM_KAFKA_SASL_PASSWORD)", mech)
	// PLAIN puts the password itself on the wire; SCRAM never sends it.
	case mech == "PLAIN" && !c.TLS && !c.SASLAllowPlaintext:
		return errors.New("STACKSTREAM_KAFKA_SASL_MECHANISM=PLAIN without STACKSTREAM_KAFKA_TLS=true would send the password in clear: set STACKSTREAM_KAFKA_TLS=true, use SCRAM-SHA-512, or set STACKSTREAM_KAFKA_SASL_ALLOW_PLAINTEXT=true to accept that")
	}
	// TLS files without TLS would be ignored silently: the connection the
	// operator meant to secure would go out in clear.
	if !c.TLS {
		for _, f := range []struct{ name, value string }{
			{"STACKSTREAM_KAFKA_TLS_CA_FILE", c.TLSCAFile},
			{"STACKSTREAM_KAFKA_TLS_CERT_FILE", c.TLSCertFile},
			{"STACKSTREAM_KAFKA_TLS_KEY_FILE", c.TLSKeyFile},
		} {
			if f.value != "" {
				return fmt.Errorf("%s is set but STACKSTREAM_KAFKA_TLS is false: set STACKSTREAM_KAFKA_TLS=true", f.name)
			}
		}
		if c.TLSInsecureSkipVerify {
			return errors.New("STACKSTREAM_KAFKA_TLS_INSECURE_SKIP_VERIFY is set but STACKSTREAM_KAFKA_TLS is false: set STACKSTREAM_KAFKA_TLS=true")
		}
	}
	return nil
}

// String prints the settings with the password masked, so a config printed
// with %v or %+v (alone or inside a service's config) never shows it.
func (c Config) String() string {
	return fmt.Sprintf("%+v", c.redacted())
}

// GoString does the same for %#v.
func (c Config) GoString() string { return c.String() }

// LogValue does the same for slog.
func (c Config) LogValue() slog.Value { return slog.AnyValue(c.redacted()) }

// redactedConfig has Config's fields but none of its methods, so printing it
// does not recurse.
type redactedConfig Config

func (c Config) redacted() redactedConfig {
	if c.SASLPassword != "" {
		c.SASLPassword = "REDACTED"
	}
	return redactedConfig(c)
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
		return explain(err, c)
	}
	return nil
}

// explain turns a failed ping into one line that names the variables to fix:
// rejected credentials, a certificate either side refused, or no answer.
// The password never appears (neither franz-go's nor the broker's messages
// carry it).
func explain(err error, c Config) error {
	brokers := strings.Join(c.Brokers, ",")
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		host     x509.HostnameError
		alert    tls.AlertError
		recErr   tls.RecordHeaderError
		firstEOF *kgo.ErrFirstReadEOF
	)
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Errorf("kafka: %s rejected SASL %s authentication as user %q (%v): fix STACKSTREAM_KAFKA_SASL_USERNAME/STACKSTREAM_KAFKA_SASL_PASSWORD",
			brokers, strings.ToUpper(c.SASLMechanism), c.SASLUsername, err)
	case errors.Is(err, kerr.UnsupportedSaslMechanism), errors.Is(err, kerr.IllegalSaslState):
		return fmt.Errorf("kafka: %s does not accept SASL %s here (%v): fix STACKSTREAM_KAFKA_SASL_MECHANISM or the listener in STACKSTREAM_KAFKA_BROKERS",
			brokers, strings.ToUpper(c.SASLMechanism), err)
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &host):
		return fmt.Errorf("kafka: TLS: the certificate of %s is not trusted (%v): set STACKSTREAM_KAFKA_TLS_CA_FILE to the CA that signed it", brokers, err)
	case errors.As(err, &alert) || tlsconfig.IsRemoteAlert(err):
		return fmt.Errorf("kafka: TLS: %s refused the handshake (%v): check the client certificate in STACKSTREAM_KAFKA_TLS_CERT_FILE/STACKSTREAM_KAFKA_TLS_KEY_FILE (its CA must be one the broker trusts)", brokers, err)
	case errors.As(err, &recErr):
		return fmt.Errorf("kafka: TLS: %s does not speak TLS (%v): unset STACKSTREAM_KAFKA_TLS or point STACKSTREAM_KAFKA_BROKERS at the TLS listener", brokers, err)
	// franz-go recognises a TLS alert read as a response size, in text only.
	case strings.Contains(err.Error(), "plaintext connection speaking to a tls endpoint"):
		return fmt.Errorf("kafka: %s expects TLS (%v): set STACKSTREAM_KAFKA_TLS=true (and STACKSTREAM_KAFKA_TLS_CA_FILE)", brokers, err)
	case errors.As(err, &firstEOF):
		// The broker hung up before answering: usually TLS on one side only,
		// or SASL the listener does not expect.
		return fmt.Errorf("kafka: %s closed the connection before answering (%v): make STACKSTREAM_KAFKA_TLS and STACKSTREAM_KAFKA_SASL_MECHANISM match the listener in STACKSTREAM_KAFKA_BROKERS", brokers, err)
	}
	return fmt.Errorf("kafka: no broker answered at STACKSTREAM_KAFKA_BROKERS=%s within %s (%v): start Kafka or fix the address", brokers, c.DialTimeout, err)
}

// Package tlsconfig builds a *tls.Config from file paths given in configuration.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// Config names the files of a TLS client setup. The Var fields name the
// variables so errors can point at them.
type Config struct {
	Enabled            bool
	CAFile             string
	CertFile           string
	KeyFile            string
	InsecureSkipVerify bool
	VarPrefix          string // e.g. "STACKSTREAM_KAFKA_TLS"
}

// Build returns nil when TLS is disabled.
func Build(c Config) (*tls.Config, error) {
	if !c.Enabled {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipVerify} // #nosec G402 -- opt-in
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s_CA_FILE: read %s: %w", c.VarPrefix, c.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s_CA_FILE: %s holds no PEM certificate", c.VarPrefix, c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s_CERT_FILE/%s_KEY_FILE: load key pair: %w", c.VarPrefix, c.VarPrefix, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// IsRemoteAlert reports whether err is a TLS alert the peer sent, such as a
// server refusing the client's certificate ("remote error: tls: bad
// certificate"). crypto/tls reports those as a *net.OpError with the
// operation "remote error" around an unexported type; clients that flatten
// errors keep only the text, which is checked as well.
func IsRemoteAlert(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return true
	}
	return err != nil && strings.Contains(err.Error(), "remote error: tls: ")
}

// The ingest service's configuration, read from STACKSTREAM_*.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/service"
	"github.com/stackstream/stackstream/schemas/record"
)

// Config of stackstream-ingest, from STACKSTREAM_* variables: the blocks
// every service shares, then its own.
type Config struct {
	service.Base
	kafka.Connection
	Ingest Ingest `envconfig:"INGEST"`
}

// Ingest holds the settings of this service alone (STACKSTREAM_INGEST_*).
type Ingest struct {
	ListenAddr        string        `envconfig:"LISTEN_ADDR" default:"127.0.0.1:4040" desc:"address of /ingest, the push API, /metrics, /healthz, /readyz (4040 is Pyroscope's port)"`
	MaxBodyBytes      int64         `envconfig:"MAX_BODY_BYTES" default:"16777216" desc:"largest request body as sent (compressed); larger ones get 413"`
	MaxConcurrent     int           `envconfig:"MAX_CONCURRENT" default:"0" desc:"requests decoded at once; 0 is GOMAXPROCS, at least 2"`
	QueueWait         time.Duration `envconfig:"QUEUE_WAIT" default:"1s" desc:"how long a request waits for a decode slot before a 429 with Retry-After"`
	MaxReadBytes      int64         `envconfig:"MAX_READ_BYTES" default:"268435456" desc:"bodies being received at once, counted at their Content-Length (or MAX_BODY_BYTES without one); slow senders hold only this, not a decode slot"`
	BufferBytes       int64         `envconfig:"BUFFER_BYTES" default:"67108864" desc:"record bytes waiting for Kafka; beyond it requests get 429 with Retry-After"`
	BufferRecords     int           `envconfig:"BUFFER_RECORDS" default:"10000" desc:"records waiting for Kafka; beyond it requests get 429 with Retry-After"`
	ProduceTimeout    time.Duration `envconfig:"PRODUCE_TIMEOUT" default:"10s" desc:"how long a request waits for Kafka to acknowledge its records before a 503 with Retry-After"`
	MaxRecordBytes    int           `envconfig:"MAX_RECORD_BYTES" default:"983040" desc:"largest record value; a larger profile is split into parts (Kafka refuses messages over max.message.bytes, 1 MB by default)"`
	MaxClockSkew      time.Duration `envconfig:"MAX_CLOCK_SKEW" default:"10m" desc:"profiles stamped later than now plus this get 400"`
	MaxAge            time.Duration `envconfig:"MAX_AGE" default:"168h" desc:"profiles older than this get 400; keep it at STACKSTREAM_INDEXER_RETENTION_DAYS; 0 accepts any past time"`
	Tokens            string        `envconfig:"TOKENS" desc:"accepted tokens, comma separated, each tenant:token (the tenant label of what it pushes) or token; sent as a Bearer token or a basic auth password; never logged"`
	TokensFile        string        `envconfig:"TOKENS_FILE" desc:"file of tokens, one tenant:token or token a line (# comments), read at start"`
	BasicAuthUser     string        `envconfig:"BASIC_AUTH_USER" desc:"accept HTTP basic auth with this user (no tenant)"`
	BasicAuthPass     string        `envconfig:"BASIC_AUTH_PASSWORD" desc:"password of STACKSTREAM_INGEST_BASIC_AUTH_USER; never logged"`
	OTLPGRPCAddr      string        `envconfig:"OTLP_GRPC_ADDR" default:"127.0.0.1:4317" desc:"address of OTLP profiles over gRPC (4317 is OTLP's port); off disables it"`
	OTLPHTTPAddr      string        `envconfig:"OTLP_HTTP_ADDR" default:"127.0.0.1:4318" desc:"address of OTLP profiles over HTTP, POST /v1development/profiles (4318 is OTLP's port; LISTEN_ADDR serves it too); off disables it"`
	TrustForwardedFor bool          `envconfig:"TRUST_FORWARDED_FOR" default:"false" desc:"take the client address (the host of pushes without a hostname tag) from X-Forwarded-For: only behind a proxy that sets it"`
}

// Validate checks values that parse but cannot work.
func (c Config) Validate() error {
	if err := c.Base.Validate(); err != nil {
		return err
	}
	if err := c.Connection.Validate(); err != nil {
		return err
	}
	i := c.Ingest
	switch {
	case strings.TrimSpace(i.ListenAddr) == "":
		return errors.New("STACKSTREAM_INGEST_LISTEN_ADDR is empty: use host:port, e.g. 127.0.0.1:4040")
	case i.MaxBodyBytes < 1<<10 || i.MaxBodyBytes > 1<<30:
		return fmt.Errorf("STACKSTREAM_INGEST_MAX_BODY_BYTES=%d must be from 1024 to 1073741824 (default 16777216)", i.MaxBodyBytes)
	case i.MaxConcurrent < 0 || i.MaxConcurrent > 10000:
		return fmt.Errorf("STACKSTREAM_INGEST_MAX_CONCURRENT=%d must be from 0 (GOMAXPROCS) to 10000", i.MaxConcurrent)
	case i.QueueWait <= 0:
		return fmt.Errorf("STACKSTREAM_INGEST_QUEUE_WAIT=%s must be positive, e.g. 1s", i.QueueWait)
	case i.MaxReadBytes < i.MaxBodyBytes:
		return fmt.Errorf("STACKSTREAM_INGEST_MAX_READ_BYTES=%d is below STACKSTREAM_INGEST_MAX_BODY_BYTES (%d): one body must fit", i.MaxReadBytes, i.MaxBodyBytes)
	case i.BufferBytes < 1<<20:
		return fmt.Errorf("STACKSTREAM_INGEST_BUFFER_BYTES=%d is below 1 MiB: use e.g. 67108864", i.BufferBytes)
	case i.BufferRecords < 1:
		return fmt.Errorf("STACKSTREAM_INGEST_BUFFER_RECORDS=%d must be positive, e.g. 10000", i.BufferRecords)
	case i.ProduceTimeout < time.Second:
		return fmt.Errorf("STACKSTREAM_INGEST_PRODUCE_TIMEOUT=%s must be at least 1s, e.g. 10s", i.ProduceTimeout)
	case i.MaxRecordBytes < 64<<10 || i.MaxRecordBytes > 16<<20:
		return fmt.Errorf("STACKSTREAM_INGEST_MAX_RECORD_BYTES=%d must be from 65536 to 16777216 (default 983040, under Kafka's default max.message.bytes)", i.MaxRecordBytes)
	case i.MaxClockSkew <= 0:
		return fmt.Errorf("STACKSTREAM_INGEST_MAX_CLOCK_SKEW=%s must be positive, e.g. 10m", i.MaxClockSkew)
	case i.MaxAge < 0:
		return fmt.Errorf("STACKSTREAM_INGEST_MAX_AGE=%s is negative: use 0 (any past time) or more, e.g. 168h", i.MaxAge)
	case (i.BasicAuthUser == "") != (i.BasicAuthPass == ""):
		return errors.New("set both STACKSTREAM_INGEST_BASIC_AUTH_USER and STACKSTREAM_INGEST_BASIC_AUTH_PASSWORD, or neither")
	}
	for _, a := range []struct{ name, addr string }{{"STACKSTREAM_INGEST_OTLP_GRPC_ADDR", i.OTLPGRPCAddr}, {"STACKSTREAM_INGEST_OTLP_HTTP_ADDR", i.OTLPHTTPAddr}} {
		if a.addr == "off" {
			continue
		}
		_, port, err := net.SplitHostPort(a.addr)
		if err != nil || port == "" {
			return fmt.Errorf("%s=%q is not host:port: use e.g. 127.0.0.1:4317, or off", a.name, a.addr)
		}
		if a.addr == i.ListenAddr && port != "0" {
			return fmt.Errorf("%s=%q is STACKSTREAM_INGEST_LISTEN_ADDR too: give each its own port, or off", a.name, a.addr)
		}
	}
	if _, port, _ := net.SplitHostPort(i.OTLPGRPCAddr); i.OTLPGRPCAddr != "off" && i.OTLPGRPCAddr == i.OTLPHTTPAddr && port != "0" {
		return fmt.Errorf("STACKSTREAM_INGEST_OTLP_GRPC_ADDR and STACKSTREAM_INGEST_OTLP_HTTP_ADDR are both %q: give each its own port", i.OTLPGRPCAddr)
	}
	_, err := i.ReadTokens()
	return err
}

// Token is one accepted token and the tenant it names ("" for none).
type Token struct {
	Tenant, Token string
}

// ReadTokens parses STACKSTREAM_INGEST_TOKENS and the file of
// STACKSTREAM_INGEST_TOKENS_FILE. Errors name the variable and the entry's
// position, never the token.
func (i Ingest) ReadTokens() ([]Token, error) {
	var out []Token
	seen := map[string]string{}
	add := func(where, entry string) error {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil
		}
		tenant, tok, ok := strings.Cut(entry, ":")
		if !ok {
			tenant, tok = "", entry
		}
		tenant, tok = strings.TrimSpace(tenant), strings.TrimSpace(tok)
		switch {
		case tok == "":
			return fmt.Errorf("%s: the token is empty: write tenant:token or token", where)
		case ok && tenant == "":
			return fmt.Errorf("%s: the tenant before : is empty: write tenant:token or token", where)
		case len(tenant) > record.MaxLabelValueBytes:
			return fmt.Errorf("%s: the tenant is %d bytes, limit %d", where, len(tenant), record.MaxLabelValueBytes)
		case strings.ContainsAny(tok, " \t"):
			return fmt.Errorf("%s: the token contains a space", where)
		}
		if t, dup := seen[tok]; dup && t != tenant {
			return fmt.Errorf("%s: the same token is given for two tenants (%q and %q)", where, t, tenant)
		}
		seen[tok] = tenant
		out = append(out, Token{Tenant: tenant, Token: tok})
		return nil
	}
	if i.Tokens != "" {
		for n, e := range strings.Split(i.Tokens, ",") {
			if err := add(fmt.Sprintf("STACKSTREAM_INGEST_TOKENS: entry %d", n+1), e); err != nil {
				return nil, err
			}
		}
	}
	if i.TokensFile != "" {
		data, err := os.ReadFile(i.TokensFile)
		if err != nil {
			return nil, fmt.Errorf("STACKSTREAM_INGEST_TOKENS_FILE: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if err := add(fmt.Sprintf("STACKSTREAM_INGEST_TOKENS_FILE=%s: line %d", i.TokensFile, n), line); err != nil {
				return nil, err
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("STACKSTREAM_INGEST_TOKENS_FILE=%s: %w", i.TokensFile, err)
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("STACKSTREAM_INGEST_TOKENS_FILE=%s holds no token: write one tenant:token or token a line", i.TokensFile)
		}
	}
	return out, nil
}

// String masks the secrets, so a config printed with %v never shows them.
func (i Ingest) String() string {
	if i.Tokens != "" {
		i.Tokens = "REDACTED"
	}
	if i.BasicAuthPass != "" {
		i.BasicAuthPass = "REDACTED"
	}
	type plain Ingest
	return fmt.Sprintf("%+v", plain(i))
}

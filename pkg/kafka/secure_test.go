package kafka

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/testenv"
)

// The tests here run against the secured broker of deploy/local/secure-up.sh
// (make up-secure): SASL_SSL with SCRAM-SHA-512, and SSL with a required
// client certificate.

func scramConfig(e testenv.SecureEnv) Config {
	return Config{
		Brokers: e.KafkaSASLBrokers, TopicPrefix: "x.", DialTimeout: 10 * time.Second,
		TLS: true, TLSCAFile: e.CAFile,
		SASLMechanism: "SCRAM-SHA-512", SASLUsername: e.KafkaUsername, SASLPassword: e.KafkaPassword,
	}
}

func mtlsConfig(e testenv.SecureEnv) Config {
	return Config{
		Brokers: e.KafkaMTLSBrokers, TopicPrefix: "x.", DialTimeout: 10 * time.Second,
		TLS: true, TLSCAFile: e.CAFile, TLSCertFile: e.ClientCertFile, TLSKeyFile: e.ClientKeyFile,
	}
}

// TestSecureRoundTrip creates a topic, produces and consumes through each
// secured listener with the client NewClient builds from the settings.
func TestSecureRoundTrip(t *testing.T) {
	e := testenv.Secure(t)
	for name, cfg := range map[string]Config{"scram-sha-512 over sasl_ssl": scramConfig(e), "mtls": mtlsConfig(e)} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			topic := testenv.Name(t, "secure-")
			adm, err := NewClient(ctx, cfg)
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer adm.Close()
			admin := kadm.NewClient(adm)
			if _, err := admin.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
				t.Fatalf("create topic %s: %v", topic, err)
			}
			t.Cleanup(func() { admin.DeleteTopics(context.Background(), topic) })

			prod, err := NewClient(ctx, cfg, kgo.DefaultProduceTopic(topic))
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			const n = 5
			for i := 0; i < n; i++ {
				if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("v%d", i))}).FirstErr(); err != nil {
					t.Fatalf("produce %d: %v", i, err)
				}
			}
			cons, err := NewClient(ctx, cfg, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			var got []string
			for len(got) < n && ctx.Err() == nil {
				fs := cons.PollFetches(ctx)
				if err := fs.Err(); err != nil && ctx.Err() == nil {
					t.Fatalf("poll: %v", err)
				}
				for _, r := range fs.Records() {
					got = append(got, string(r.Value))
				}
			}
			if strings.Join(got, ",") != "v0,v1,v2,v3,v4" {
				t.Fatalf("consumed %q, want v0..v4 in order", got)
			}
		})
	}
}

// TestSecureRejected: a wrong password, a client certificate from another CA,
// no client certificate, and a CA that did not sign the broker's certificate
// each stop NewClient with one line naming what to fix, never the password.
func TestSecureRejected(t *testing.T) {
	e := testenv.Secure(t)
	wrongPassword := scramConfig(e)
	wrongPassword.SASLPassword = "wrong-" + e.KafkaPassword[:8]
	otherClient := mtlsConfig(e)
	otherClient.TLSCertFile, otherClient.TLSKeyFile = e.OtherClientCertFile, e.OtherClientKeyFile
	noClientCert := mtlsConfig(e)
	noClientCert.TLSCertFile, noClientCert.TLSKeyFile = "", ""
	untrustedSASL := scramConfig(e)
	untrustedSASL.TLSCAFile = e.OtherCAFile
	untrustedMTLS := mtlsConfig(e)
	untrustedMTLS.TLSCAFile = e.OtherCAFile
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"wrong password", wrongPassword, []string{"rejected SASL SCRAM-SHA-512 authentication", `user "` + e.KafkaUsername + `"`, "STACKSTREAM_KAFKA_SASL_PASSWORD"}},
		{"client certificate from another CA", otherClient, []string{"TLS:", "refused the handshake", "STACKSTREAM_KAFKA_TLS_CERT_FILE"}},
		{"no client certificate", noClientCert, []string{"TLS:", "refused the handshake", "STACKSTREAM_KAFKA_TLS_CERT_FILE"}},
		{"untrusted broker certificate, sasl_ssl", untrustedSASL, []string{"TLS:", "not trusted", "certificate signed by unknown authority", "STACKSTREAM_KAFKA_TLS_CA_FILE"}},
		{"untrusted broker certificate, mtls", untrustedMTLS, []string{"TLS:", "not trusted", "STACKSTREAM_KAFKA_TLS_CA_FILE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tt.cfg.DialTimeout = 5 * time.Second
			cl, err := NewClient(ctx, tt.cfg)
			if err == nil {
				cl.Close()
				t.Fatal("NewClient succeeded")
			}
			msg := err.Error()
			t.Logf("error: %s", msg)
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q", w)
				}
			}
			if strings.Contains(msg, e.KafkaPassword) || strings.Contains(msg, tt.cfg.SASLPassword) && tt.cfg.SASLPassword != "" || strings.Contains(msg, "\n") {
				t.Errorf("error shows a password or spans lines")
			}
		})
	}
}

// TestTLSToPlaintextListener: TLS to the plain broker fails with a line
// naming the settings that must match the listener.
func TestTLSToPlaintextListener(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	cfg := Config{Brokers: brokers, TopicPrefix: "x.", DialTimeout: 5 * time.Second, TLS: true}
	cl, err := NewClient(context.Background(), cfg)
	if err == nil {
		cl.Close()
		t.Fatal("NewClient succeeded")
	}
	if !strings.Contains(err.Error(), "closed the connection before answering") || !strings.Contains(err.Error(), "STACKSTREAM_KAFKA_TLS") {
		t.Fatalf("NewClient error = %v, want one naming STACKSTREAM_KAFKA_TLS", err)
	}
}

// TestPlaintextToTLSListener: a client without TLS or SASL at the SASL_SSL
// listener fails with a line naming the settings that must match it.
func TestPlaintextToTLSListener(t *testing.T) {
	e := testenv.Secure(t)
	cfg := Config{Brokers: e.KafkaSASLBrokers, TopicPrefix: "x.", DialTimeout: 5 * time.Second}
	cl, err := NewClient(context.Background(), cfg)
	if err == nil {
		cl.Close()
		t.Fatal("NewClient succeeded")
	}
	if !strings.Contains(err.Error(), "expects TLS") || !strings.Contains(err.Error(), "STACKSTREAM_KAFKA_TLS=true") {
		t.Fatalf("NewClient error = %v, want one naming STACKSTREAM_KAFKA_TLS", err)
	}
}

package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// SecureEnv says where the secured Kafka and OpenSearch of
// deploy/local/secure-up.sh (make up-secure) listen and how to reach them.
type SecureEnv struct {
	CAFile, ClientCertFile, ClientKeyFile string
	// A CA nobody trusts, and a client certificate it signed.
	OtherCAFile, OtherClientCertFile, OtherClientKeyFile string

	KafkaSASLBrokers []string // SASL_SSL, SCRAM-SHA-512
	KafkaMTLSBrokers []string // SSL with a required client certificate
	KafkaUsername    string
	KafkaPassword    string

	OpenSearchURL                    string // https
	AdminUsername, AdminPassword     string // all_access
	IndexerUsername, IndexerPassword string // role stackstream_indexer
	IndexerPrefix                    string // the indices that role may write
}

// SecureEnvFile is the state file secure-up.sh writes:
// STACKSTREAM_TEST_SECURE_ENV, else $STACKSTREAM_STATE/secure/secure.env, else
// .run/secure/secure.env at the root of the work tree (found from the
// working directory by its go.work).
func SecureEnvFile() string {
	if f := os.Getenv("STACKSTREAM_TEST_SECURE_ENV"); f != "" {
		return f
	}
	if d := os.Getenv("STACKSTREAM_STATE"); d != "" {
		return filepath.Join(d, "secure", "secure.env")
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return filepath.Join(dir, ".run", "secure", "secure.env")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Secure returns the secured servers after checking that both accept
// connections; missing ones skip the test, or fail it under CI.
func Secure(t testing.TB) SecureEnv {
	t.Helper()
	path := SecureEnvFile()
	e, err := ReadSecureEnv(path)
	if err != nil {
		Unavailable(t, "secured Kafka and OpenSearch: %v (run make up-secure)", err)
		return e
	}
	host := strings.TrimPrefix(e.OpenSearchURL, "https://")
	for _, addr := range []string{e.KafkaSASLBrokers[0], e.KafkaMTLSBrokers[0], host} {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			Unavailable(t, "secured server at %s (from %s): %v (run make up-secure)", addr, path, err)
			return e
		}
		c.Close()
	}
	return e
}

// ReadSecureEnv parses the state file of secure-up.sh.
func ReadSecureEnv(path string) (SecureEnv, error) {
	var e SecureEnv
	if path == "" {
		return e, errors.New("no state file: set STACKSTREAM_TEST_SECURE_ENV")
	}
	f, err := os.Open(path)
	if err != nil {
		return e, fmt.Errorf("read state file: %w", err)
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		vars[k] = v
	}
	if err := sc.Err(); err != nil {
		return e, fmt.Errorf("read state file %s: %w", path, err)
	}
	fields := map[string]*string{
		"SECURE_CA_FILE":                     &e.CAFile,
		"SECURE_CLIENT_CERT_FILE":            &e.ClientCertFile,
		"SECURE_CLIENT_KEY_FILE":             &e.ClientKeyFile,
		"SECURE_OTHER_CA_FILE":               &e.OtherCAFile,
		"SECURE_OTHER_CLIENT_CERT_FILE":      &e.OtherClientCertFile,
		"SECURE_OTHER_CLIENT_KEY_FILE":       &e.OtherClientKeyFile,
		"SECURE_KAFKA_SCRAM_USERNAME":        &e.KafkaUsername,
		"SECURE_KAFKA_SCRAM_PASSWORD":        &e.KafkaPassword,
		"SECURE_OPENSEARCH_URL":              &e.OpenSearchURL,
		"SECURE_OPENSEARCH_ADMIN_USERNAME":   &e.AdminUsername,
		"SECURE_OPENSEARCH_ADMIN_PASSWORD":   &e.AdminPassword,
		"SECURE_OPENSEARCH_INDEXER_USERNAME": &e.IndexerUsername,
		"SECURE_OPENSEARCH_INDEXER_PASSWORD": &e.IndexerPassword,
		"SECURE_OPENSEARCH_INDEXER_PREFIX":   &e.IndexerPrefix,
	}
	for k, p := range fields {
		if vars[k] == "" {
			return e, fmt.Errorf("state file %s lacks %s", path, k)
		}
		*p = vars[k]
	}
	for k, p := range map[string]*[]string{"SECURE_KAFKA_SASL_BROKERS": &e.KafkaSASLBrokers, "SECURE_KAFKA_MTLS_BROKERS": &e.KafkaMTLSBrokers} {
		if vars[k] == "" {
			return e, fmt.Errorf("state file %s lacks %s", path, k)
		}
		*p = strings.Split(vars[k], ",")
	}
	return e, nil
}

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/testenv"
)

// TestSecretsNeverLogged runs every binary with credentials against the
// secured Kafka and OpenSearch (make up-secure) until it is ready, then
// stops it, and checks that no password, token or URL userinfo appears in
// anything it printed: start-up, serving, shutdown, -h, and the start-up
// errors of wrong credentials.
func TestSecretsNeverLogged(t *testing.T) {
	e := testenv.Secure(t)
	testenv.Root(t) // the agent
	bin := buildAll(t)

	name := testenv.Name(t, e.IndexerPrefix+"sec-")
	host := strings.TrimPrefix(e.OpenSearchURL, "https://")
	const (
		queryToken         = "query-token-0d5c7e1f9a"
		queryBasicPassword = "query-basic-pw-62b0d4"
		dbgUser            = "dbg-user-7f3a"
		dbgPassword        = "dbg-secret-51c2e8"
		wrongKafka         = "wrong-kafka-pw-3e9d1b"
		wrongOpenSearch    = "wrong-os-pw-8a4f60"
	)
	// What must never be printed; the user names of URLs with userinfo only
	// in that form.
	secrets := []string{
		e.KafkaPassword, e.AdminPassword, e.IndexerPassword, queryToken, queryBasicPassword, dbgPassword, wrongKafka, wrongOpenSearch,
		"://" + e.AdminUsername + ":", "://" + e.AdminUsername + "@", dbgUser,
	}

	kafkaSCRAM := []string{
		"STACKSTREAM_KAFKA_BROKERS=" + strings.Join(e.KafkaSASLBrokers, ","),
		"STACKSTREAM_KAFKA_TLS=true",
		"STACKSTREAM_KAFKA_TLS_CA_FILE=" + e.CAFile,
		"STACKSTREAM_KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
		"STACKSTREAM_KAFKA_SASL_USERNAME=" + e.KafkaUsername,
		"STACKSTREAM_KAFKA_SASL_PASSWORD=" + e.KafkaPassword,
	}
	kafkaMTLS := []string{
		"STACKSTREAM_KAFKA_BROKERS=" + strings.Join(e.KafkaMTLSBrokers, ","),
		"STACKSTREAM_KAFKA_TLS=true",
		"STACKSTREAM_KAFKA_TLS_CA_FILE=" + e.CAFile,
		"STACKSTREAM_KAFKA_TLS_CERT_FILE=" + e.ClientCertFile,
		"STACKSTREAM_KAFKA_TLS_KEY_FILE=" + e.ClientKeyFile,
	}
	osAs := func(user, password string) []string {
		return []string{
			"STACKSTREAM_OPENSEARCH_URL=" + e.OpenSearchURL,
			"STACKSTREAM_OPENSEARCH_USERNAME=" + user,
			"STACKSTREAM_OPENSEARCH_PASSWORD=" + password,
			"STACKSTREAM_OPENSEARCH_TLS_CA_FILE=" + e.CAFile,
		}
	}
	// The admin's credentials as URL userinfo instead of variables.
	osUserinfo := []string{
		"STACKSTREAM_OPENSEARCH_URL=https://" + url.UserPassword(e.AdminUsername, e.AdminPassword).String() + "@" + host,
		"STACKSTREAM_OPENSEARCH_TLS_CA_FILE=" + e.CAFile,
	}
	common := []string{
		"STACKSTREAM_KAFKA_TOPIC_PREFIX=" + name + ".",
		"STACKSTREAM_OPENSEARCH_INDEX_PREFIX=" + name + "-",
		"STACKSTREAM_CTL_PARTITIONS=1",
		"STACKSTREAM_SYMBOLIZER_GROUP=" + name + "-symbolizer",
		"STACKSTREAM_SYMBOLIZER_TRANSACTIONAL_ID=" + name + "-symbolizer-0",
		"STACKSTREAM_SYMBOLIZER_DEBUGINFOD_URLS=https://" + dbgUser + ":" + dbgPassword + "@127.0.0.1:1/",
		"STACKSTREAM_INDEXER_GROUP=" + name + "-indexer",
		"STACKSTREAM_ROLLUP_GROUP=" + name + "-rollup",
		"STACKSTREAM_AGENT_INTERVAL=2s",
		"STACKSTREAM_AGENT_HOST_ID=" + name,
		"STACKSTREAM_AGENT_PIDS=" + strconv.Itoa(os.Getpid()),
		"STACKSTREAM_QUERY_AUTH_TOKEN=" + queryToken,
		"STACKSTREAM_LOG_LEVEL=debug",
	}
	envOf := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	t.Cleanup(func() { secureCleanup(t, e, name) })

	var mu sync.Mutex
	outputs := map[string]string{} // what each run printed, by run name
	record := func(run, out string) {
		mu.Lock()
		outputs[run] = out
		mu.Unlock()
	}

	// stackctl init: topics and templates, as the admin over SCRAM.
	out, err := secRun(bin, "stackctl", envOf(common, kafkaSCRAM, osAs(e.AdminUsername, e.AdminPassword)), "init")
	record("stackctl init", out)
	if err != nil {
		t.Fatalf("stackctl init: %v\n%s", err, out)
	}

	// Every long-running service until it is ready; the indexer as the
	// indexer user, the query service with the admin in the URL's userinfo.
	queryAddr := freeAddr(t)
	services := []struct {
		name string
		env  []string
	}{
		{"stackstream-symbolizer", envOf(common, kafkaSCRAM)},
		{"stackstream-indexer", envOf(common, kafkaSCRAM, osAs(e.IndexerUsername, e.IndexerPassword))},
		{"stackstream-rollup", envOf(common, kafkaMTLS, osAs(e.AdminUsername, e.AdminPassword))},
		{"stackstream-query", envOf(common, osUserinfo, []string{"STACKSTREAM_QUERY_LISTEN_ADDR=" + queryAddr})},
		{"stackstream-agent", envOf(common, kafkaSCRAM)},
	}
	var procs []*secProc
	for _, s := range services {
		addr := queryAddr
		env := s.env
		if s.name != "stackstream-query" {
			addr = freeAddr(t)
			env = append(env, "STACKSTREAM_LISTEN_ADDR="+addr)
		}
		p := secStart(t, filepath.Join(bin, s.name), env)
		p.addr, p.name = addr, s.name
		procs = append(procs, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, p := range procs {
		p.waitReady(ctx, t, queryToken)
	}
	// The query service answers with and without the token: a refused
	// request must not echo what it was given either.
	for _, tok := range []string{queryToken, "not-" + queryToken} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+queryAddr+"/api/v1/series?type=cpu&from=now-15m&to=now", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	// stackctl status while they run: over SCRAM, over mTLS, and with the
	// OpenSearch credentials in the URL.
	for run, env := range map[string][]string{
		"stackctl status scram":    envOf(common, kafkaSCRAM, osAs(e.AdminUsername, e.AdminPassword)),
		"stackctl status mtls":     envOf(common, kafkaMTLS, osAs(e.AdminUsername, e.AdminPassword)),
		"stackctl status userinfo": envOf(common, kafkaSCRAM, osUserinfo),
	} {
		out, err := secRun(bin, "stackctl", env, "status")
		record(run, out)
		if err != nil {
			t.Errorf("%s: %v\n%s", run, err, out)
		}
	}
	for _, p := range procs {
		out := p.stop(t)
		record(p.name, out)
		// The role stackstream_indexer must hold what the indexer does at
		// start-up and in its first retention pass.
		if p.name == "stackstream-indexer" {
			for _, denied := range []string{"security_exception", "no permissions", "HTTP 403"} {
				if strings.Contains(out, denied) {
					t.Errorf("the indexer as user %s was refused something (%q):\n%s", e.IndexerUsername, denied, tail(out, 3000))
				}
			}
		}
	}

	// -h with every credential set: the table shows defaults, never values.
	all := envOf(common, kafkaSCRAM, osAs(e.AdminUsername, e.AdminPassword),
		[]string{"STACKSTREAM_QUERY_BASIC_AUTH_USER=viewer", "STACKSTREAM_QUERY_BASIC_AUTH_PASSWORD=" + queryBasicPassword})
	for _, b := range binaries {
		out, _ := secRun(bin, b, all, "-h")
		record(b+" -h", out)
		if !strings.Contains(out, "STACKSTREAM_") {
			t.Errorf("%s -h printed no variables:\n%s", b, tail(out, 2000))
		}
	}

	// Wrong credentials stop start-up with a line that does not show them.
	wrongKafkaEnv := envOf(common, kafkaSCRAM, []string{"STACKSTREAM_KAFKA_SASL_PASSWORD=" + wrongKafka}, osAs(e.AdminUsername, e.AdminPassword))
	wrongOSEnv := envOf(common, kafkaSCRAM, osAs(e.IndexerUsername, wrongOpenSearch))
	wrongURLEnv := envOf(common, kafkaSCRAM, []string{
		"STACKSTREAM_OPENSEARCH_URL=https://" + url.UserPassword(e.AdminUsername, wrongOpenSearch).String() + "@" + host,
		"STACKSTREAM_OPENSEARCH_TLS_CA_FILE=" + e.CAFile,
	})
	for _, c := range []struct {
		bin  string
		env  []string
		args []string
		want string
	}{
		{"stackstream-symbolizer", wrongKafkaEnv, nil, "STACKSTREAM_KAFKA_SASL_PASSWORD"},
		{"stackstream-indexer", wrongKafkaEnv, nil, "STACKSTREAM_KAFKA_SASL_PASSWORD"},
		{"stackstream-rollup", wrongKafkaEnv, nil, "STACKSTREAM_KAFKA_SASL_PASSWORD"},
		{"stackstream-agent", wrongKafkaEnv, nil, "STACKSTREAM_KAFKA_SASL_PASSWORD"},
		{"stackctl", wrongKafkaEnv, []string{"status"}, "STACKSTREAM_KAFKA_SASL_PASSWORD"},
		{"stackstream-indexer", wrongOSEnv, nil, "STACKSTREAM_OPENSEARCH_PASSWORD"},
		{"stackstream-rollup", wrongOSEnv, nil, "STACKSTREAM_OPENSEARCH_PASSWORD"},
		{"stackstream-query", wrongOSEnv, nil, "STACKSTREAM_OPENSEARCH_PASSWORD"},
		{"stackstream-query", wrongURLEnv, nil, "https://***@" + host},
		{"stackctl", wrongURLEnv, []string{"init"}, "https://***@" + host},
	} {
		run := c.bin + " " + strings.Join(c.args, " ") + " with a wrong " + c.want
		env := append(c.env, "STACKSTREAM_LISTEN_ADDR="+freeAddr(t), "STACKSTREAM_QUERY_LISTEN_ADDR="+freeAddr(t))
		out, err := secRun(bin, c.bin, env, c.args...)
		record(run, out)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %v, want a failed start naming %q:\n%s", run, err, c.want, tail(out, 2000))
		}
	}

	for run, out := range outputs {
		for _, s := range secrets {
			if i := strings.Index(out, s); i >= 0 {
				lo, hi := max(0, i-200), min(len(out), i+len(s)+100)
				t.Errorf("%s printed a secret (%s...): %s", run, s[:4], strings.ReplaceAll(out[lo:hi], s, "<SECRET>"))
			}
		}
	}
	if !t.Failed() {
		t.Logf("%d runs checked, %d bytes of output", len(outputs), func() (n int) {
			for _, o := range outputs {
				n += len(o)
			}
			return
		}())
	}
}

// secRun runs a binary to its end (at most two minutes) and returns what it
// printed on stdout and stderr.
func secRun(bin, name string, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// secProc is a service started by secStart, with everything it printed.
type secProc struct {
	name, addr string
	cmd        *exec.Cmd
	out        *lockedBuffer
	done       chan struct{}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func secStart(t *testing.T, bin string, env []string) *secProc {
	t.Helper()
	p := &secProc{cmd: exec.Command(bin), out: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// waitReady polls /readyz until it answers 200; a process that exits first
// fails the test with its output.
func (p *secProc) waitReady(ctx context.Context, t *testing.T, token string) {
	t.Helper()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before it was ready:\n%s", p.name, tail(p.out.String(), 4000))
		case <-ctx.Done():
			t.Fatalf("%s not ready at %s/readyz:\n%s", p.name, p.addr, tail(p.out.String(), 4000))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// stop sends SIGINT, waits for the exit (SIGKILL after 30 s) and returns
// everything the process printed.
func (p *secProc) stop(t *testing.T) string {
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop within 30s of SIGINT", p.name)
		p.cmd.Process.Kill()
		<-p.done
	}
	return p.out.String()
}

// secureCleanup deletes the test's topics, indices and templates on the
// secured servers.
func secureCleanup(t *testing.T, e testenv.SecureEnv, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := kafka.Config{Brokers: e.KafkaSASLBrokers, TopicPrefix: name + ".", DialTimeout: 10 * time.Second, TLS: true, TLSCAFile: e.CAFile,
		SASLMechanism: "SCRAM-SHA-512", SASLUsername: e.KafkaUsername, SASLPassword: e.KafkaPassword}
	if cl, err := kafka.NewClient(ctx, cfg); err == nil {
		kadm.NewClient(cl).DeleteTopics(ctx, cfg.Topics().All()...)
		cl.Close()
	} else {
		t.Logf("cleanup: %v", err)
	}
	pem, err := os.ReadFile(e.CAFile)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 20 * time.Second}
	for _, path := range []string{"/" + name + "-*?expand_wildcards=all", "/_index_template/" + name + "-*"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, e.OpenSearchURL+path, nil)
		req.SetBasicAuth(e.AdminUsername, e.AdminPassword)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
		} else {
			t.Logf("cleanup: %v", err)
		}
	}
}

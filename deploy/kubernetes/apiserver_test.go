package kubernetes

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stackstream/stackstream/deploy/internal/servicebin"
)

// kubeBinDir is where deploy/internal/kubeapiserver/build.sh (make kube-apiserver)
// puts the kube-apiserver and etcd built from their Go modules.
const kubeBinDir = "deploy/internal/kubeapiserver/bin"

// apiServer is a kube-apiserver with its etcd, both on 127.0.0.1 only, for the
// lifetime of one test.
type apiServer struct {
	url    string       // https://127.0.0.1:PORT
	admin  *http.Client // with the admin client certificate
	bearer *http.Client // without: requests carry a token
}

// startAPIServer starts etcd and kube-apiserver from kubeBinDir with a PKI made for
// this test (a CA, the server's certificate for 127.0.0.1, an admin client
// certificate in system:masters, the service-account signing key), and waits until
// /readyz answers. Without the binaries the test skips, or fails when CI=true.
func startAPIServer(t *testing.T) *apiServer {
	t.Helper()
	root, err := servicebin.Root(".")
	if err != nil {
		t.Fatal(err)
	}
	bins := filepath.Join(root, kubeBinDir)
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bins, b)); err != nil {
			msg := fmt.Sprintf("%s: %v; build it with `make kube-apiserver` (deploy/internal/kubeapiserver/build.sh)", b, err)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}

	dir := t.TempDir()
	p := makePKI(t, dir)
	etcdClient, etcdPeer, port := freePort(t), freePort(t), freePort(t)

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	etcd := startProcess(t, dir, "etcd", filepath.Join(bins, "etcd"),
		"-data-dir", filepath.Join(dir, "etcd"),
		"-listen-client-url", etcdURL,
		"-listen-peer-url", "http://127.0.0.1:"+strconv.Itoa(etcdPeer))

	newClient := func(certs ...tls.Certificate) *http.Client {
		c := &http.Client{
			Timeout: 30 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{
				RootCAs:      p.pool,
				Certificates: certs,
				MinVersion:   tls.VersionTLS12,
			}},
		}
		t.Cleanup(c.CloseIdleConnections)
		return c
	}
	s := &apiServer{url: "https://127.0.0.1:" + strconv.Itoa(port), admin: newClient(p.admin), bearer: newClient()}
	apiserver := startProcess(t, dir, "kube-apiserver", filepath.Join(bins, "kube-apiserver"),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// The endpoint reconciler refuses a loopback address for the kubernetes
		// Service's endpoints; nothing here reaches the apiserver through that Service.
		"--endpoint-reconciler-type=none",
		"--secure-port="+strconv.Itoa(port),
		"--etcd-servers="+etcdURL,
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--tls-cert-file="+p.serverCert,
		"--tls-private-key-file="+p.serverKey,
		"--client-ca-file="+p.caFile,
		"--anonymous-auth=false",
		"--authorization-mode=RBAC",
		"--service-account-issuer="+s.url,
		"--service-account-key-file="+p.saPublic,
		"--service-account-signing-key-file="+p.saKey,
		// Addresses for Services' cluster IPs, only allocated: nothing routes them here.
		"--service-cluster-ip-range=10.96.0.0/24",
		// A cluster that refuses privileged containers: the manifests must not need them.
		"--allow-privileged=false",
	)

	// The apiserver is ready once etcd is reachable, the built-in objects (the
	// default namespace, RBAC's bootstrap roles) exist and the post-start hooks ran.
	start := time.Now()
	deadline := start.Add(3 * time.Minute)
	for {
		status, body, _, err := s.do(http.MethodGet, "/readyz", "", nil)
		if err == nil && status == http.StatusOK {
			if status, _, _, _ = s.do(http.MethodGet, "/api/v1/namespaces/default", "", nil); status == http.StatusOK {
				break
			}
		}
		select {
		case <-etcd.exited:
			t.Fatalf("etcd exited before kube-apiserver was ready: %v (its log follows)", etcd.err)
		case <-apiserver.exited:
			t.Fatalf("kube-apiserver exited before it was ready: %v (its log follows)", apiserver.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready after 3m: last /readyz: status %d, %v\n%s", status, err, body)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("kube-apiserver ready on %s after %s", s.url, time.Since(start).Round(time.Millisecond))
	return s
}

// do sends one request with the admin certificate and returns the status, the body
// and the texts of the Warning headers.
func (s *apiServer) do(method, path, contentType string, body []byte) (int, []byte, []string, error) {
	return s.send(s.admin, "", method, path, contentType, body)
}

// doAs sends one request authenticated by token alone.
func (s *apiServer) doAs(token, method, path, contentType string, body []byte) (int, []byte, []string, error) {
	return s.send(s.bearer, token, method, path, contentType, body)
}

func (s *apiServer) send(client *http.Client, token, method, path, contentType string, body []byte) (int, []byte, []string, error) {
	req, err := http.NewRequest(method, s.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(nil, resp.Body, 16<<20)); err != nil {
		return resp.StatusCode, nil, nil, fmt.Errorf("read %s %s: %w", method, path, err)
	}
	var warnings []string
	for _, h := range resp.Header.Values("Warning") {
		warnings = append(warnings, warningText(h))
	}
	return resp.StatusCode, buf.Bytes(), warnings, nil
}

// warningText is the text of a Warning header as the apiserver writes it
// (`299 - "text"`, RFC 7234's warn-code, agent and quoted text), or the header
// itself when it is not in that form.
func warningText(h string) string {
	code, quoted, ok := strings.Cut(h, " - ")
	if !ok || code != "299" {
		return h
	}
	text, err := strconv.Unquote(quoted)
	if err != nil {
		return h
	}
	return text
}

// process is a started command; exited is closed when it has ended, with err set.
type process struct {
	exited chan struct{}
	err    error
}

// startProcess runs bin with its output in dir/name.log, shown when the test fails,
// and stops it (TERM, then KILL after 15s) when the test ends.
func startProcess(t *testing.T, dir, name, bin string, args ...string) *process {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	// A test binary killed by go test's timeout runs no cleanup: the kernel then
	// stops the servers, so none is left holding its port.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 15 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		logFile.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &process{exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.exited
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("---- last lines of %s ----\n%s", name+".log", b)
		}
	})
	return p
}

// freePort returns a port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// pki is the test cluster's certificates and keys, as files for kube-apiserver and
// in memory for the test's client.
type pki struct {
	caFile, serverCert, serverKey, saKey, saPublic string
	pool                                           *x509.CertPool
	admin                                          tls.Certificate
}

func makePKI(t *testing.T, dir string) pki {
	t.Helper()
	now := time.Now()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	serial := int64(1)
	sign := func(tmpl *x509.Certificate, key *ecdsa.PrivateKey, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, []byte) {
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c, der
	}

	var p pki
	caKey := newKey()
	ca, caDER := sign(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "stackstream apply-test CA"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, caKey, nil, nil)
	p.caFile = write("ca.crt", "CERTIFICATE", caDER)
	p.pool = x509.NewCertPool()
	p.pool.AddCert(ca)

	serverKey := newKey()
	_, serverDER := sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, serverKey, ca, caKey)
	p.serverCert = write("server.crt", "CERTIFICATE", serverDER)
	p.serverKey = write("server.key", "EC PRIVATE KEY", keyDER(serverKey))

	// system:masters passes every authorization check (RBAC's bootstrap binding).
	adminKey := newKey()
	_, adminDER := sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "apply-test-admin", Organization: []string{"system:masters"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, adminKey, ca, caKey)
	p.admin = tls.Certificate{Certificate: [][]byte{adminDER}, PrivateKey: adminKey}

	saKey := newKey()
	p.saKey = write("sa.key", "EC PRIVATE KEY", keyDER(saKey))
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	p.saPublic = write("sa.pub", "PUBLIC KEY", saPub)
	return p
}

// statusMessage returns the message of a metav1.Status body, or the body itself.
func statusMessage(body []byte) string {
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil || st.Message == "" {
		return string(body)
	}
	return st.Message
}

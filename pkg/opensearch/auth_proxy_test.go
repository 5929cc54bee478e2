package opensearch

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
)

// startAuthProxy runs a real nginx with HTTP basic auth in front of the real
// OpenSearch node (the usual way to secure a node without the security
// plugin, which the local node does not carry) and returns its URL.
func startAuthProxy(t *testing.T, upstream, user, password string) string {
	t.Helper()
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		testenv.Unavailable(t, "nginx (apt-get install nginx-light)")
	}
	dir := t.TempDir()
	hash, err := exec.Command("openssl", "passwd", "-apr1", password).Output()
	if err != nil {
		testenv.Unavailable(t, "openssl passwd: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "htpasswd"), []byte(user+":"+strings.TrimSpace(string(hash))+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  server {
    listen %[2]s;
    location / {
      auth_basic "opensearch";
      auth_basic_user_file %[1]s/htpasswd;
      proxy_pass %[3]s;
      proxy_set_header Authorization "";
    }
  }
}
`, dir, addr, upstream)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nginx, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"))
	out, _ := os.Create(filepath.Join(dir, "stderr"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := "http://" + addr
	for i := 0; ; i++ {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return url
		}
		if i == 50 {
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx did not answer on %s: %s", addr, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestBasicAuthThroughProxy: a wrong password stops start-up with one line
// naming the variables (and not the password); the right one works end to end.
func TestBasicAuthThroughProxy(t *testing.T) {
	upstream := testenv.OpenSearchURL(t)
	url := startAuthProxy(t, upstream, "stackstream", "right-pass")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cfg := Config{URLs: []string{url}, Username: "stackstream", Password: "wrong-pass", Timeout: 10 * time.Second}
	_, err := NewClient(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "STACKSTREAM_OPENSEARCH_PASSWORD") || strings.Contains(err.Error(), "wrong-pass") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("wrong password: error = %v, want one line naming the variable without the password", err)
	}

	cfg.Password = "right-pass"
	cl, err := NewClient(ctx, cfg)
	if err != nil {
		t.Fatalf("right password: %v", err)
	}
	prefix := testenv.Name(t, "t-") + "-"
	t.Cleanup(func() { RemovePrefix(context.Background(), cl, prefix) })
	if _, err := ApplyTemplates(ctx, cl, prefix, indices.DefaultSettings); err != nil {
		t.Fatalf("apply templates through the proxy: %v", err)
	}
}

package e2e

import (
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestUpNamesTakenPort checks that make up refuses a taken port before
// starting anything, naming the port and the variable that moves it. A fresh
// state dir keeps the running local services out of it.
func TestUpNamesTakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	cmd := exec.Command(filepath.Join("..", "deploy", "local", "up.sh"))
	cmd.Env = append(cmd.Environ(), "STACKSTREAM_STATE="+t.TempDir(), "STACKSTREAM_KAFKA_PORT="+port)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("up.sh succeeded with port %s taken:\n%s", port, out)
	}
	want := "port " + port + " is already in use"
	if !strings.Contains(string(out), want) || !strings.Contains(string(out), "STACKSTREAM_KAFKA_PORT") {
		t.Fatalf("up.sh output lacks %q and the variable:\n%s", want, out)
	}
}

// Package servicebin builds the stackstream service binaries from the workspace and
// reads what they accept, so the deployment tests check manifests and units against
// the binaries themselves rather than against a copied list.
package servicebin

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Root returns the workspace root (the directory holding go.work) above dir.
func Root(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("find go.work above %s: none", dir)
		}
		d = parent
	}
}

// Build compiles stackstream-<service> from root into outDir and returns its path.
func Build(root, service, outDir string) (string, error) {
	pkg := "./services/" + service + "/cmd/stackstream-" + service
	out := filepath.Join(outDir, "stackstream-"+service)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// Variables runs bin -h and returns the STACKSTREAM_* variables it lists.
func Variables(bin string) (map[string]bool, error) {
	cmd := exec.Command(bin, "-h")
	// An empty working directory: -h must not read a developer's ./.env.
	cmd.Dir = os.TempDir()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s -h: %w\n%s", bin, err, out.Bytes())
	}
	vars := map[string]bool{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 && strings.HasPrefix(f[0], "STACKSTREAM_") {
			vars[f[0]] = true
		}
	}
	if len(vars) == 0 {
		return nil, fmt.Errorf("%s -h listed no STACKSTREAM_ variable:\n%s", bin, out.Bytes())
	}
	return vars, nil
}

// Command release builds a stackstream release (`make release`): static
// binaries for linux/amd64 and linux/arm64 with the version in -h and
// /metrics, a CycloneDX SBOM for each, one archive per architecture, one
// multi-platform OCI image archive per binary (`docker load -i`), and
// SHA256SUMS over all of them.
//
//	go run ./deploy/release -version v1.2.3 -out dist
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/stackstream/stackstream/deploy/internal/servicebin"
)

// versionRe is what a release may be called: it becomes part of file names
// and image tags.
var versionRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)

func main() {
	if err := mainErr(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func mainErr(args []string) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	version := fs.String("version", "", "the release's name, e.g. v1.2.3 (default: git describe)")
	out := fs.String("out", "dist", "where the artifacts go")
	arches := fs.String("arch", "amd64,arm64", "architectures, comma separated")
	only := fs.String("binaries", "", "build only these binaries, comma separated (default: all)")
	images := fs.Bool("images", true, "write the OCI image archives")
	ca := fs.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA certificates copied into the images; empty for none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := servicebin.Root(".")
	if err != nil {
		return err
	}
	if *version == "" {
		*version = git(root, "describe", "--tags", "--always", "--dirty")
	}
	if !versionRe.MatchString(*version) {
		return fmt.Errorf("-version %q: use letters, digits, '.', '_', '+', '-' (e.g. v1.2.3)", *version)
	}
	c := config{
		root: root, out: *out, version: *version, commit: git(root, "rev-parse", "--short=12", "HEAD"),
		created: commitTime(root), images: *images, caBundle: *ca, progress: os.Stdout,
		only: map[string]bool{},
	}
	for _, a := range strings.Split(*arches, ",") {
		if a = strings.TrimSpace(a); a != "amd64" && a != "arm64" {
			return fmt.Errorf("-arch %q: use amd64 and/or arm64", a)
		}
		c.arches = append(c.arches, strings.TrimSpace(a))
	}
	if *only != "" {
		for _, b := range strings.Split(*only, ",") {
			if !known(b) {
				return fmt.Errorf("-binaries: no binary %q", b)
			}
			c.only[b] = true
		}
	}
	if c.commit == "" {
		c.commit = "unknown"
	}
	begin := time.Now()
	arts, err := run(c)
	if err != nil {
		return err
	}
	abs, _ := filepath.Abs(c.out)
	var total int64
	for _, a := range arts {
		total += a.size
	}
	fmt.Printf("release %s (commit %s): %d artifacts, %.1f MiB in %s, in %.0fs\n", c.version, c.commit, len(arts), float64(total)/(1<<20), abs, time.Since(begin).Seconds())
	return nil
}

func known(name string) bool {
	for _, b := range binaries {
		if b.name == name {
			return true
		}
	}
	return false
}

// git runs a git command in root and returns its trimmed output, "" when it
// fails (a tree without git).
func git(root string, args ...string) string {
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	b, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// commitTime is SOURCE_DATE_EPOCH, else the commit's time: the same commit
// gives the same archives.
func commitTime(root string) time.Time {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		s = git(root, "log", "-1", "--format=%ct")
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(n, 0).UTC()
	}
	return time.Unix(0, 0).UTC()
}

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/stackstream/stackstream/deploy/internal/oci"
	"github.com/stackstream/stackstream/deploy/internal/sbom"
)

// binary is one command of the release and where its main package is.
type binary struct {
	name   string
	pkg    string
	arches []string // the architectures it builds for; nil: every one asked
}

// binaries are every command of the workspace, each for every architecture
// asked (the agent's BPF objects are generated for both: bpf/profiler/gen.go).
var binaries = []binary{
	{"stackstream-agent", "./services/agent/cmd/stackstream-agent", nil},
	{"stackstream-symbolizer", "./services/symbolizer/cmd/stackstream-symbolizer", nil},
	{"stackstream-indexer", "./services/indexer/cmd/stackstream-indexer", nil},
	{"stackstream-rollup", "./services/rollup/cmd/stackstream-rollup", nil},
	{"stackstream-ingest", "./services/ingest/cmd/stackstream-ingest", nil},
	{"stackstream-query", "./services/query/cmd/stackstream-query", nil},
	{"stackctl", "./services/ctl/cmd/stackctl", nil},
}

// config is what one release run makes.
type config struct {
	root     string // the workspace (go.work)
	out      string
	version  string
	commit   string
	created  time.Time // every timestamp in the artifacts, for reproducible bytes
	arches   []string
	only     map[string]bool // binaries to build; empty: all
	images   bool
	caBundle string // CA certificates put in the images ("" for none)
	progress io.Writer
}

// artifact is one built file of the release.
type artifact struct {
	name string // relative to out
	size int64
}

// built is one binary for one architecture.
type built struct {
	bin  binary
	arch string
	path string
	data []byte
}

// run builds the binaries, their SBOMs, one archive per architecture, one
// image archive per binary and SHA256SUMS, reporting each step.
func run(c config) ([]artifact, error) {
	if err := os.MkdirAll(filepath.Join(c.out, "images"), 0o755); err != nil {
		return nil, err
	}
	var jobs []built
	for _, arch := range c.arches {
		for _, b := range binaries {
			if len(c.only) > 0 && !c.only[b.name] {
				continue
			}
			if b.arches != nil && !contains(b.arches, arch) {
				fmt.Fprintf(c.progress, "skip  %s linux/%s: not built for this architecture\n", b.name, arch)
				continue
			}
			jobs = append(jobs, built{bin: b, arch: arch})
		}
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("nothing to build for %v", c.arches)
	}
	tmp, err := os.MkdirTemp("", "stackstream-release-")
	if err != nil {
		return nil, err
	}
	// The SBOMs read the binaries from here: removed when packed.
	defer os.RemoveAll(tmp)
	for i := range jobs {
		j := &jobs[i]
		begin := time.Now()
		j.path = filepath.Join(tmp, j.arch, j.bin.name)
		if err := c.build(j.bin, j.arch, j.path); err != nil {
			return nil, err
		}
		if j.data, err = os.ReadFile(j.path); err != nil {
			return nil, err
		}
		fmt.Fprintf(c.progress, "[%d/%d] build %s linux/%s: %.1f MiB in %.1fs\n", i+1, len(jobs), j.bin.name, j.arch, float64(len(j.data))/(1<<20), time.Since(begin).Seconds())
	}
	return pack(c, jobs)
}

// pack writes the release's files from built binaries.
func pack(c config, jobs []built) ([]artifact, error) {
	if err := os.MkdirAll(filepath.Join(c.out, "images"), 0o755); err != nil {
		return nil, err
	}
	var arts []artifact
	add := func(name string, data []byte) error {
		if err := os.WriteFile(filepath.Join(c.out, name), data, 0o644); err != nil {
			return err
		}
		arts = append(arts, artifact{name, int64(len(data))})
		return nil
	}
	byArch := map[string][]built{}
	for _, j := range jobs {
		byArch[j.arch] = append(byArch[j.arch], j)
	}
	for _, arch := range c.arches {
		js := byArch[arch]
		if len(js) == 0 {
			continue
		}
		var files []tarFile
		for _, j := range js {
			doc, err := sbom.ForBinary(j.path, j.bin.name, c.version, sha256Hex(j.data), c.created)
			if err != nil {
				return nil, err
			}
			var buf bytes.Buffer
			if err := doc.Write(&buf); err != nil {
				return nil, err
			}
			name := fmt.Sprintf("%s_%s_linux_%s.cdx.json", j.bin.name, c.version, arch)
			if err := add(name, buf.Bytes()); err != nil {
				return nil, err
			}
			files = append(files, tarFile{"bin/" + j.bin.name, 0o755, j.data}, tarFile{"sbom/" + name, 0o644, buf.Bytes()})
		}
		dir := fmt.Sprintf("stackstream_%s_linux_%s", c.version, arch)
		archive, err := targz(dir, files, c.created)
		if err != nil {
			return nil, err
		}
		if err := add(dir+".tar.gz", archive); err != nil {
			return nil, err
		}
		fmt.Fprintf(c.progress, "archive %s.tar.gz: %d binaries, %.1f MiB\n", dir, len(js), float64(len(archive))/(1<<20))
	}

	if c.images {
		var ca []byte
		if c.caBundle != "" {
			var err error
			if ca, err = os.ReadFile(c.caBundle); err != nil {
				return nil, fmt.Errorf("CA bundle for the images: %w", err)
			}
		}
		for _, b := range binaries {
			var imgs []oci.Image
			for _, arch := range c.arches {
				for _, j := range byArch[arch] {
					if j.bin.name == b.name {
						imgs = append(imgs, imageOf(j, c, ca))
					}
				}
			}
			if len(imgs) == 0 {
				continue
			}
			var buf bytes.Buffer
			if err := oci.Write(&buf, "stackstream/"+b.name, c.version, c.created, imgs); err != nil {
				return nil, err
			}
			name := fmt.Sprintf("images/%s_%s.oci.tar", b.name, c.version)
			if err := add(name, buf.Bytes()); err != nil {
				return nil, err
			}
			fmt.Fprintf(c.progress, "image stackstream/%s:%s: %d platforms, %.1f MiB\n", b.name, c.version, len(imgs), float64(buf.Len())/(1<<20))
		}
	}

	sort.Slice(arts, func(i, j int) bool { return arts[i].name < arts[j].name })
	var sums strings.Builder
	for _, a := range arts {
		data, err := os.ReadFile(filepath.Join(c.out, a.name))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&sums, "%s  %s\n", sha256Hex(data), a.name)
	}
	if err := add("SHA256SUMS", []byte(sums.String())); err != nil {
		return nil, err
	}
	return arts, nil
}

// build compiles b for linux/arch: static, without local paths, with the
// release's version.
func (c config) build(b binary, arch, out string) error {
	ldflags := fmt.Sprintf("-s -w -X github.com/stackstream/stackstream/pkg/version.Version=%s -X github.com/stackstream/stackstream/pkg/version.Commit=%s", c.version, c.commit)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, b.pkg)
	cmd.Dir = c.root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=-buildvcs=false")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s for linux/%s: %w\n%s", b.name, arch, err, msg)
	}
	return nil
}

// imageOf is the image of one binary: the binary, the CA certificates for
// TLS to Kafka, OpenSearch and debuginfod, and nothing else. Services run as
// 65532 (nonroot); the agent as root, which its capabilities need.
func imageOf(j built, c config, ca []byte) oci.Image {
	files := []oci.File{{Path: "/usr/local/bin/" + j.bin.name, Mode: 0o755, Data: j.data}}
	if ca != nil {
		files = append(files, oci.File{Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Data: ca})
	}
	user := "65532:65532"
	if j.bin.name == "stackstream-agent" {
		user = "0:0"
	}
	return oci.Image{
		OS: "linux", Arch: j.arch, Files: files, User: user,
		Entrypoint: []string{"/usr/local/bin/" + j.bin.name},
		Env:        []string{"PATH=/usr/local/bin"},
		Labels: map[string]string{
			"org.opencontainers.image.title":    j.bin.name,
			"org.opencontainers.image.version":  c.version,
			"org.opencontainers.image.revision": c.commit,
		},
	}
}

type tarFile struct {
	name string
	mode int64
	data []byte
}

// targz archives files under dir/.
func targz(dir string, files []tarFile, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: dir + "/" + f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: created, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

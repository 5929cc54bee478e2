package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/deploy/internal/oci"
	"github.com/stackstream/stackstream/deploy/internal/sbom"
	"github.com/stackstream/stackstream/deploy/internal/servicebin"
)

const testVersion = "v0.0.0-releasetest"

// release builds stackctl (the smallest command) for both architectures and
// returns its configuration.
func release(t *testing.T, out string) config {
	t.Helper()
	root, err := servicebin.Root(".")
	if err != nil {
		t.Fatal(err)
	}
	ca := "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(ca); err != nil {
		ca = ""
	}
	var progress bytes.Buffer
	c := config{root: root, out: out, version: testVersion, commit: "0123456789ab",
		created: time.Unix(1764547200, 0).UTC(), arches: []string{"amd64", "arm64"},
		only: map[string]bool{"stackctl": true}, images: true, caBundle: ca, progress: &progress}
	if _, err = run(c); err != nil {
		t.Fatalf("release: %v\n%s", err, progress.String())
	}
	for _, want := range []string{"[1/2] build stackctl linux/amd64", "[2/2] build stackctl linux/arm64", "image stackstream/stackctl:" + testVersion + ": 2 platforms"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
	return c
}

func TestRelease(t *testing.T) {
	out := t.TempDir()
	c := release(t, out)

	// Every artifact is in SHA256SUMS with its digest.
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(sums))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != sum {
			t.Errorf("%s: SHA256SUMS says %s", name, sum)
		}
		listed[name] = true
	}
	for _, want := range []string{
		"stackstream_" + testVersion + "_linux_amd64.tar.gz", "stackstream_" + testVersion + "_linux_arm64.tar.gz",
		"stackctl_" + testVersion + "_linux_amd64.cdx.json", "stackctl_" + testVersion + "_linux_arm64.cdx.json",
		"images/stackctl_" + testVersion + ".oci.tar",
	} {
		if !listed[want] {
			t.Errorf("SHA256SUMS lacks %s (has %v)", want, listed)
		}
	}

	bins := map[string][]byte{}
	for _, arch := range []string{"amd64", "arm64"} {
		files := untargz(t, filepath.Join(out, "stackstream_"+testVersion+"_linux_"+arch+".tar.gz"))
		dir := "stackstream_" + testVersion + "_linux_" + arch + "/"
		bin := files[dir+"bin/stackctl"]
		if bin == nil || files[dir+"sbom/stackctl_"+testVersion+"_linux_"+arch+".cdx.json"] == nil {
			t.Fatalf("%s archive holds %v", arch, keys(files))
		}
		bins[arch] = bin
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
		if f.Machine != want || f.Section(".interp") != nil {
			t.Errorf("%s binary: machine %v, interpreter %v; want static %v", arch, f.Machine, f.Section(".interp") != nil, want)
		}

		var doc sbom.Document
		if err := json.Unmarshal(files[dir+"sbom/stackctl_"+testVersion+"_linux_"+arch+".cdx.json"], &doc); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(bin)
		app := doc.Metadata.Component
		if doc.BOMFormat != "CycloneDX" || app.Name != "stackctl" || app.Version != testVersion || len(app.Hashes) != 1 || app.Hashes[0].Content != hex.EncodeToString(sum[:]) {
			t.Errorf("%s SBOM metadata %+v", arch, doc.Metadata)
		}
		var franz, goPlatform bool
		for _, c := range doc.Components {
			franz = franz || (c.Name == "github.com/twmb/franz-go" && strings.HasPrefix(c.PURL, "pkg:golang/github.com/twmb/franz-go@v") && c.Version != "")
			goPlatform = goPlatform || (c.Type == "platform" && c.Name == "go")
		}
		if !franz || !goPlatform {
			t.Errorf("%s SBOM components lack franz-go (%v) or the Go toolchain (%v)", arch, franz, goPlatform)
		}
	}

	// The binaries report the release: amd64 natively, arm64 under qemu.
	dir := t.TempDir()
	for arch, bin := range bins {
		p := filepath.Join(dir, arch)
		if err := os.WriteFile(p, bin, 0o755); err != nil {
			t.Fatal(err)
		}
		var cmd *exec.Cmd
		switch arch {
		case "amd64":
			cmd = exec.Command(p, "-h")
		case "arm64":
			qemu, err := exec.LookPath("qemu-aarch64-static")
			if err != nil {
				qemu, err = exec.LookPath("qemu-aarch64")
			}
			if err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("no qemu-aarch64(-static) to run the arm64 binary (.ci/run installs qemu-user-static)")
				}
				t.Logf("no qemu-aarch64: the arm64 binary is checked by its ELF header only")
				continue
			}
			cmd = exec.Command(qemu, p, "-h")
		}
		cmd.Dir = dir
		outp, _ := cmd.CombinedOutput()
		if !strings.Contains(string(outp), testVersion) || !strings.Contains(string(outp), "linux/"+arch) {
			t.Errorf("%s stackctl -h does not report %s linux/%s:\n%.600s", arch, testVersion, arch, outp)
		}
	}

	checkImage(t, filepath.Join(out, "images", "stackctl_"+testVersion+".oci.tar"), bins)

	// The same binaries give the same bytes: archives, SBOMs and images have
	// no time or order of their own (the binaries are Go's reproducible builds).
	var jobs []built
	ctl := binaries[slices.IndexFunc(binaries, func(b binary) bool { return b.name == "stackctl" })]
	for arch, bin := range bins {
		p := filepath.Join(dir, arch)
		jobs = append(jobs, built{bin: ctl, arch: arch, path: p, data: bin})
	}
	if jobs[0].arch != "amd64" {
		jobs[0], jobs[1] = jobs[1], jobs[0]
	}
	c.out = t.TempDir()
	if _, err := pack(c, jobs); err != nil {
		t.Fatal(err)
	}
	sums2, err := os.ReadFile(filepath.Join(c.out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sums, sums2) {
		t.Errorf("packing the same binaries again differs:\n%s\n----\n%s", sums, sums2)
	}
}

// checkImage follows the OCI layout from index.json to every blob, checking
// digests and sizes, platforms, the config and the layer's binary.
func checkImage(t *testing.T, path string, bins map[string][]byte) {
	t.Helper()
	files := untar(t, path)
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %s", files["oci-layout"])
	}
	blob := func(d oci.Descriptor) []byte {
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
		sum := sha256.Sum256(b)
		if !ok || "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(b)) != d.Size {
			t.Fatalf("blob %s (%d bytes) missing or wrong", d.Digest, d.Size)
		}
		return b
	}
	var top oci.Index
	if err := json.Unmarshal(files["index.json"], &top); err != nil || len(top.Manifests) != 1 {
		t.Fatalf("index.json: %v %+v", err, top)
	}
	if got := top.Manifests[0].Annotations["io.containerd.image.name"]; got != "stackstream/stackctl:"+testVersion {
		t.Errorf("image name %q", got)
	}
	var list oci.Index
	json.Unmarshal(blob(top.Manifests[0]), &list)
	if len(list.Manifests) != 2 {
		t.Fatalf("%d platforms, want 2", len(list.Manifests))
	}
	for _, md := range list.Manifests {
		arch := md.Platform.Architecture
		var m oci.Manifest
		json.Unmarshal(blob(md), &m)
		var cfg oci.Config
		json.Unmarshal(blob(m.Config), &cfg)
		if cfg.Architecture != arch || cfg.OS != "linux" || cfg.Config.User != "65532:65532" || cfg.Config.Entrypoint[0] != "/usr/local/bin/stackctl" ||
			cfg.Config.Labels["org.opencontainers.image.version"] != testVersion {
			t.Errorf("%s config %+v", arch, cfg)
		}
		if len(m.Layers) != 1 || len(cfg.RootFS.DiffIDs) != 1 {
			t.Fatalf("%s: %d layers, %d diff IDs", arch, len(m.Layers), len(cfg.RootFS.DiffIDs))
		}
		zr, err := gzip.NewReader(bytes.NewReader(blob(m.Layers[0])))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(zr)
		if sum := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(sum[:]) != cfg.RootFS.DiffIDs[0] {
			t.Errorf("%s: diff ID does not match the layer", arch)
		}
		tr := tar.NewReader(bytes.NewReader(raw))
		found := false
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			if h.Name == "usr/local/bin/stackctl" {
				b, _ := io.ReadAll(tr)
				found = h.Mode == 0o755 && bytes.Equal(b, bins[arch])
			}
		}
		if !found {
			t.Errorf("%s layer lacks the release's binary at /usr/local/bin/stackctl (mode 0755)", arch)
		}
	}
}

func untargz(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	return readTar(t, zr)
}

func untar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return readTar(t, f)
}

func readTar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = b
	}
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestAgentArm64: the agent, BPF objects included, builds for arm64 and runs
// there (under qemu-aarch64-static: its -h, not the BPF programs, which need
// an arm64 kernel).
func TestAgentArm64(t *testing.T) {
	root, err := servicebin.Root(".")
	if err != nil {
		t.Fatal(err)
	}
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no qemu-aarch64-static (.ci/run installs qemu-user-static)")
		}
		t.Skip("no qemu-aarch64-static")
	}
	c := config{root: root, version: testVersion, commit: "0123456789ab"}
	bin := filepath.Join(t.TempDir(), "stackstream-agent")
	if err := c.build(binaries[0], "arm64", bin); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != elf.EM_AARCH64 {
		t.Fatalf("machine %v", f.Machine)
	}
	cmd := exec.Command(qemu, bin, "-h")
	cmd.Dir = t.TempDir()
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), testVersion+" ") || !strings.Contains(string(out), "linux/arm64") || !strings.Contains(string(out), "STACKSTREAM_AGENT_FREQUENCY") {
		t.Errorf("arm64 agent -h:\n%.800s", out)
	}
}

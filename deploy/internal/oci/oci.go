// Package oci writes container images without a container engine: an OCI
// image layout (index.json, oci-layout, blobs/sha256/...) in one tar, which
// `docker load`, `podman load`, skopeo and containerd import. One archive
// holds one repository:tag for several platforms (a nested image index), each
// image one layer made of the files given: a static binary needs no base.
package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"
)

// Media types of the OCI image specification.
const (
	MediaIndex    = "application/vnd.oci.image.index.v1+json"
	MediaManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaConfig   = "application/vnd.oci.image.config.v1+json"
	MediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// File is one regular file of an image's layer.
type File struct {
	Path string // absolute, e.g. /usr/local/bin/stackstream-agent
	Mode int64
	Data []byte
}

// Image is one platform's image.
type Image struct {
	OS, Arch   string
	Files      []File
	Entrypoint []string
	User       string
	Env        []string
	Labels     map[string]string
}

// Descriptor points at a blob.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *Platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Index is an image index (index.json, or a multi-platform list).
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Manifest is one platform's image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Config is the image configuration.
type Config struct {
	Created      string       `json:"created"`
	Architecture string       `json:"architecture"`
	OS           string       `json:"os"`
	Config       ImageConfig  `json:"config"`
	RootFS       RootFS       `json:"rootfs"`
	History      []HistoryRow `json:"history"`
}

type ImageConfig struct {
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	User       string            `json:"User,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

type RootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type HistoryRow struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

// layout collects blobs by digest.
type layout struct {
	blobs map[string][]byte
	order []string
}

func (l *layout) add(media string, b []byte) Descriptor {
	sum := sha256.Sum256(b)
	d := "sha256:" + hex.EncodeToString(sum[:])
	if _, ok := l.blobs[d]; !ok {
		l.blobs[d] = b
		l.order = append(l.order, d)
	}
	return Descriptor{MediaType: media, Digest: d, Size: int64(len(b))}
}

func (l *layout) addJSON(media string, v any) (Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Descriptor{}, err
	}
	return l.add(media, b), nil
}

// Write writes the image layout of name:tag (name like
// "stackstream/stackstream-agent") for images, one per platform, as a tar to
// w. created stamps every file and the configs, so the same inputs give the
// same bytes.
func Write(w io.Writer, name, tag string, created time.Time, images []Image) error {
	if len(images) == 0 {
		return fmt.Errorf("no image for %s:%s", name, tag)
	}
	l := &layout{blobs: map[string][]byte{}}
	var list []Descriptor
	for _, img := range images {
		layer, diffID, err := layerOf(img.Files, created)
		if err != nil {
			return fmt.Errorf("%s/%s layer: %w", img.OS, img.Arch, err)
		}
		ld := l.add(MediaLayer, layer)
		cfg := Config{
			Created: created.UTC().Format(time.RFC3339), Architecture: img.Arch, OS: img.OS,
			Config:  ImageConfig{Entrypoint: img.Entrypoint, User: img.User, Env: img.Env, Labels: img.Labels},
			RootFS:  RootFS{Type: "layers", DiffIDs: []string{diffID}},
			History: []HistoryRow{{Created: created.UTC().Format(time.RFC3339), CreatedBy: "stackstream make release"}},
		}
		cd, err := l.addJSON(MediaConfig, cfg)
		if err != nil {
			return err
		}
		md, err := l.addJSON(MediaManifest, Manifest{SchemaVersion: 2, MediaType: MediaManifest, Config: cd, Layers: []Descriptor{ld}})
		if err != nil {
			return err
		}
		md.Platform = &Platform{Architecture: img.Arch, OS: img.OS}
		list = append(list, md)
	}
	ld, err := l.addJSON(MediaIndex, Index{SchemaVersion: 2, MediaType: MediaIndex, Manifests: list})
	if err != nil {
		return err
	}
	ld.Annotations = map[string]string{
		"org.opencontainers.image.ref.name": tag,
		"io.containerd.image.name":          name + ":" + tag,
	}
	top, err := json.Marshal(Index{SchemaVersion: 2, MediaType: MediaIndex, Manifests: []Descriptor{ld}})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	put := func(p string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(b)), ModTime: created, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	if err := put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := put("index.json", top); err != nil {
		return err
	}
	for _, d := range l.order {
		if err := put("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), l.blobs[d]); err != nil {
			return err
		}
	}
	return tw.Close()
}

// layerOf makes the gzip layer of files (with their parent directories) and
// returns it with its diff ID, the digest of the uncompressed tar.
func layerOf(files []File, created time.Time) ([]byte, string, error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	dirs := map[string]bool{}
	var dirList []string
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			return nil, "", fmt.Errorf("file path %q: want a clean absolute path", f.Path)
		}
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			if !dirs[d] {
				dirs[d] = true
				dirList = append(dirList, d)
			}
		}
	}
	sort.Strings(dirList)
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: created, Format: tar.FormatPAX}); err != nil {
			return nil, "", err
		}
	}
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for _, f := range sorted {
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(f.Path, "/"), Mode: f.Mode, Size: int64(len(f.Data)), Typeflag: tar.TypeReg, ModTime: created, Format: tar.FormatPAX}); err != nil {
			return nil, "", err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(raw.Bytes())
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, "", err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return gz.Bytes(), "sha256:" + hex.EncodeToString(sum[:]), nil
}

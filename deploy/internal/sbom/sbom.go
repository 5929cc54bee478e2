// Package sbom writes the software bill of materials of a Go binary, as
// CycloneDX 1.5 JSON, from the module list the Go linker embeds in it: the
// main module, every dependency module with its version and go.sum hash, and
// the Go toolchain.
package sbom

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Document is the subset of CycloneDX 1.5 written here.
type Document struct {
	BOMFormat   string      `json:"bomFormat"`
	SpecVersion string      `json:"specVersion"`
	Version     int         `json:"version"`
	Metadata    Metadata    `json:"metadata"`
	Components  []Component `json:"components"`
}

type Metadata struct {
	Timestamp string    `json:"timestamp"`
	Component Component `json:"component"`
}

type Component struct {
	Type       string     `json:"type"`
	Name       string     `json:"name"`
	Version    string     `json:"version,omitempty"`
	PURL       string     `json:"purl,omitempty"`
	Hashes     []Hash     `json:"hashes,omitempty"`
	Properties []Property `json:"properties,omitempty"`
}

type Hash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

type Property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ForBinary reads the module information of the Go binary at path. name and
// version describe the binary itself (its release, not its module's
// "(devel)"); binarySHA256 is its hex digest.
func ForBinary(path, name, version, binarySHA256 string, now time.Time) (*Document, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read build info of %s: %w", path, err)
	}
	app := Component{Type: "application", Name: name, Version: version,
		Hashes: []Hash{{Alg: "SHA-256", Content: binarySHA256}},
		PURL:   purl(info.Main.Path, version),
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "GOOS", "GOARCH", "CGO_ENABLED", "-trimpath", "vcs.revision":
			app.Properties = append(app.Properties, Property{Name: "go:" + s.Key, Value: s.Value})
		}
	}
	doc := &Document{BOMFormat: "CycloneDX", SpecVersion: "1.5", Version: 1,
		Metadata: Metadata{Timestamp: now.UTC().Format(time.RFC3339), Component: app}}
	doc.Components = append(doc.Components, Component{Type: "platform", Name: "go", Version: strings.TrimPrefix(info.GoVersion, "go"), PURL: "pkg:golang/std@" + info.GoVersion})
	for _, d := range info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		c := Component{Type: "library", Name: m.Path, Version: m.Version, PURL: purl(m.Path, m.Version)}
		if m.Sum != "" {
			// go.sum's h1: hash (SHA-256 over the module's file tree).
			c.Properties = append(c.Properties, Property{Name: "go:sum", Value: m.Sum})
		}
		doc.Components = append(doc.Components, c)
	}
	return doc, nil
}

// purl is the package URL of a Go module version.
func purl(module, version string) string {
	if version == "" || version == "(devel)" {
		return "pkg:golang/" + module
	}
	return "pkg:golang/" + module + "@" + version
}

// Write encodes doc as indented JSON.
func (doc *Document) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

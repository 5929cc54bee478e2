// Package systemd holds the unit files that run stackstream on hosts outside
// Kubernetes, with example environment files (docs/DEPLOY.md). It has no code: its
// tests run `systemd-analyze verify` on the units against freshly built binaries and
// check their capabilities, sandboxing and variables.
package systemd

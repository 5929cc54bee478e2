// Package uitest runs the web UI's browser tests (services/query/ui/tests)
// against the real query server over documents indexed in the real
// OpenSearch, with playwright-core driving the system's chromium.
package uitest

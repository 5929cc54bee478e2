// Package sdktest pushes profiles to stackstream-ingest with the real
// Pyroscope SDKs: the Go SDK (a program in testdata/gosdk with its own
// go.mod, built by the test) and the Python package pyroscope-io
// (installed into a virtualenv in a temporary directory), and the Java
// agent io.pyroscope:agent (fetched by mvn) on a Java program.
package sdktest

package kubernetes

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/stackstream/stackstream/deploy/internal/servicebin"
)

// TestVariablesExist: every STACKSTREAM_* variable a container gets, set directly or
// through a ConfigMap, is one its binary lists in -h. envconfig ignores unknown
// variables, so a misspelt or renamed one would otherwise be silently without effect.
func TestVariablesExist(t *testing.T) {
	root, err := servicebin.Root(".")
	if err != nil {
		t.Fatal(err)
	}
	bins := t.TempDir()
	known := map[string]map[string]bool{} // service -> variables
	for _, dir := range kustomizations {
		o := build(t, dir)
		for _, w := range o.workloads() {
			t.Run(dir+"/"+w.service, func(t *testing.T) {
				vars, ok := known[w.service]
				if !ok {
					bin, err := servicebin.Build(root, w.service, bins)
					if err != nil {
						t.Fatal(err)
					}
					if vars, err = servicebin.Variables(bin); err != nil {
						t.Fatal(err)
					}
					known[w.service] = vars
				}
				for _, c := range allContainers(w.pod) {
					for _, name := range containerVariables(t, o, c) {
						if strings.HasPrefix(name, "STACKSTREAM_") && !vars[name] {
							t.Errorf("%s/%s sets %s, which stackstream-%s -h does not list", w.name, c.Name, name, w.service)
						}
					}
				}
			})
		}
	}
}

// containerVariables names every variable c gets: env entries and the keys of the
// ConfigMaps it takes whole.
func containerVariables(t *testing.T, o *objects, c corev1.Container) []string {
	t.Helper()
	var names []string
	for _, e := range c.Env {
		names = append(names, e.Name)
	}
	for _, f := range c.EnvFrom {
		if f.ConfigMapRef == nil {
			continue
		}
		cm := o.configMap(f.ConfigMapRef.Name)
		if cm == nil {
			t.Errorf("%s reads ConfigMap %s, which the build does not hold", c.Name, f.ConfigMapRef.Name)
			continue
		}
		for k := range cm.Data {
			names = append(names, f.Prefix+k)
		}
	}
	return names
}

// lagMetrics returns the full names of the gauges named *lag_records that file
// registers, whether written whole (Name: "stackstream_x_lag_records"), as
// Namespace/Subsystem/Name with string constants of the same file, or through
// the consumer vocabulary (telemetry.NewConsumer(reg, "x", ...) registers
// stackstream_x_lag_records, checked in pkg/telemetry/consumer.go).
func lagMetrics(t *testing.T, file string) []string {
	t.Helper()
	root, err := servicebin.Root(".")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, file), nil, 0)
	if err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	consts := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok {
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if s, ok := stringValue(vs.Values[i], nil); ok {
						consts[name.Name] = s
					}
				}
			}
		}
		return true
	})
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		parts := map[string]string{}
		for _, e := range lit.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, ok := kv.Key.(*ast.Ident)
			if !ok {
				continue
			}
			if s, ok := stringValue(kv.Value, consts); ok {
				parts[key.Name] = s
			}
		}
		if strings.HasSuffix(parts["Name"], "lag_records") && file != consumerMetricsFile {
			var full []string
			for _, p := range []string{parts["Namespace"], parts["Subsystem"], parts["Name"]} {
				if p != "" {
					full = append(full, p)
				}
			}
			names = append(names, strings.Join(full, "_"))
		}
		return true
	})
	if file != consumerMetricsFile {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "NewConsumer" {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "telemetry" {
				return true
			}
			if svc, ok := stringValue(call.Args[1], consts); ok {
				if !slices.Contains(lagMetrics(t, consumerMetricsFile), "lag_records") {
					t.Fatalf("%s does not register lag_records", consumerMetricsFile)
				}
				names = append(names, "stackstream_"+svc+"_lag_records")
			}
			return true
		})
	} else {
		// The consumer vocabulary's namespace is the service's: the bare name.
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Value == `"lag_records"` {
				names = append(names, "lag_records")
			}
			return true
		})
	}
	if len(names) == 0 {
		t.Fatalf("%s registers no *lag_records metric", file)
	}
	return names
}

// consumerMetricsFile registers the metrics every consumer shares.
const consumerMetricsFile = "pkg/telemetry/consumer.go"

// stringValue evaluates a string literal or an identifier naming a string constant.
func stringValue(e ast.Expr, consts map[string]string) (string, bool) {
	switch v := e.(type) {
	case *ast.BasicLit:
		if v.Kind == token.STRING {
			s, err := strconv.Unquote(v.Value)
			return s, err == nil
		}
	case *ast.Ident:
		s, ok := consts[v.Name]
		return s, ok
	}
	return "", false
}

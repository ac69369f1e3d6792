package dsync_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestImportRules keeps the layering of DESIGN.md true: the SPI imports
// nothing of the module, the internals below the root package import
// nothing above them, the portable packages never depend on a concrete
// backend or client, the embedded etcd server stays out of the library,
// only retry imports the backoff library, and the library depends on the
// OpenTelemetry API only (no SDK, no exporter), recorded by
// internal/telemetry alone.
func TestImportRules(t *testing.T) {
	const mod = "github.com/dsync-dev/dsync"
	deps := func(pkg string) []string {
		t.Helper()
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		return strings.Fields(string(out))
	}
	forbid := func(pkg string, bad func(dep string) bool, why string) {
		t.Helper()
		for _, d := range deps(pkg) {
			if d != pkg && bad(d) {
				t.Errorf("%s depends on %s: %s", pkg, d, why)
			}
		}
	}
	isModule := func(d string) bool { return d == mod || strings.HasPrefix(d, mod+"/") }
	isClient := func(d string) bool {
		return strings.HasPrefix(d, "github.com/redis/go-redis") || strings.HasPrefix(d, "go.etcd.io/etcd")
	}
	isTelemetrySDK := func(d string) bool {
		for _, p := range []string{"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", "go.opentelemetry.io/contrib", "github.com/prometheus/"} {
			if strings.HasPrefix(d, p) {
				return true
			}
		}
		return false
	}
	isBackend := func(d string) bool {
		return strings.HasPrefix(d, mod+"/backends/") && d != mod+"/backends/backendtest" || strings.HasPrefix(d, mod+"/redlock")
	}

	forbid(mod+"/backends", isModule, "the SPI imports nothing from this module")
	portable := append([]string{mod, mod + "/locker", mod + "/retry", mod + "/internal/lease"},
		optional(mod+"/semaphore", mod+"/leader")...)
	for _, p := range portable {
		forbid(p, isClient, "portable packages never import a Redis or etcd client")
		forbid(p, isBackend, "portable packages never import a concrete backend; backends register by URL scheme")
		forbid(p, func(d string) bool { return strings.HasPrefix(d, "go.etcd.io/etcd/server") }, "the etcd server is for tests and the CLI only")
	}

	// Library packages (everything but tests, test tooling, commands,
	// examples, the benchmark harness and the conformance suite), in every
	// module of the workspace, never import test tooling, and no library
	// internal imports a public package above the SPI.
	isTooling := func(d string) bool {
		return strings.HasPrefix(d, mod+"/internal/testenv") || strings.HasPrefix(d, mod+"/tests/")
	}
	isLibrary := func(p string) bool {
		for _, not := range []string{"/internal/testenv/", "/tests/", "/cmd/", "/examples/", "/bench/"} {
			if strings.HasPrefix(p+"/", mod+not) {
				return false
			}
		}
		return p != mod+"/backends/backendtest"
	}
	libs, err := exec.Command("go", "list", mod+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s/...: %v\n%s", mod, err, libs)
	}
	if !slices.Contains(strings.Fields(string(libs)), mod+"/backends/etcd") {
		t.Fatalf("go list %s/... does not list backends/etcd: is the test running in the workspace (go.work)?", mod)
	}
	for _, p := range strings.Fields(string(libs)) {
		if !isLibrary(p) {
			continue
		}
		forbid(p, isTooling, "library packages never import test tooling")
		forbid(p, func(d string) bool { return strings.HasPrefix(d, "go.etcd.io/etcd/server") }, "library packages never link a server")
		forbid(p, isTelemetrySDK, "the library uses the OpenTelemetry API only; the application installs the SDK and exporters")
	}
	// The internals below the root package: telemetry, the hooks that
	// reach a Backend's insides, the run-while-held helper.
	below := []string{mod + "/backends", mod + "/internal/telemetry"}
	for _, p := range []string{mod + "/internal/telemetry", mod + "/internal/hook", mod + "/internal/leased"} {
		forbid(p, func(d string) bool { return isModule(d) && !slices.Contains(below, d) },
			"it sits below the root package, which imports it")
	}

	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}: {{join .Imports \" \"}}", mod+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s/...: %v\n%s", mod, err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		library := isLibrary(pkg)
		for _, imp := range strings.Fields(imports) {
			if strings.HasPrefix(imp, "github.com/cenkalti/backoff") && pkg != mod+"/retry" {
				t.Errorf("%s imports %s: only retry may", pkg, imp)
			}
			// Telemetry is written once: other library packages name the
			// API's provider types in their options, no more.
			if library && strings.HasPrefix(imp, "go.opentelemetry.io/") && pkg != mod+"/internal/telemetry" &&
				imp != "go.opentelemetry.io/otel/metric" && imp != "go.opentelemetry.io/otel/trace" {
				t.Errorf("%s imports %s: only internal/telemetry records telemetry", pkg, imp)
			}
		}
	}
}

// TestExamplesImportNoInternal: a test file with Example functions, which
// pkg.go.dev shows for readers to copy, imports no internal package of the
// module (a reader's module could not import it).
func TestExamplesImportNoInternal(t *testing.T) {
	const internal = "github.com/dsync-dev/dsync/internal"
	found := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bench" || d.Name() == "testdata") {
			return filepath.SkipDir // the benchmark harness has no examples to copy
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		examples := false
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example") {
				examples = true
			}
		}
		if !examples {
			return nil
		}
		found++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == internal || strings.HasPrefix(p, internal+"/") {
				t.Errorf("%s has examples and imports %s", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no file with examples found")
	}
}

// optional returns the packages among pkgs that exist yet.
func optional(pkgs ...string) []string {
	var out []string
	for _, p := range pkgs {
		if exec.Command("go", "list", p).Run() == nil {
			out = append(out, p)
		}
	}
	return out
}

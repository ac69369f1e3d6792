package dsync_test

import (
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// maxDocLines bounds the root package's summary: it holds what an
// application calls, and nothing a backend author needs (that is package
// backends).
const maxDocLines = 20

// TestRootAPIFitsOnePage: `go doc -short` of the root package has at most
// maxDocLines lines.
func TestRootAPIFitsOnePage(t *testing.T) {
	out, err := exec.Command("go", "doc", "-short", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go doc -short .: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > maxDocLines {
		t.Errorf("go doc -short . has %d lines, want at most %d: move what applications do not call out of the root package\n%s",
			len(lines), maxDocLines, out)
	}
}

// TestNoDriverInApplicationAPI: no exported name of the packages
// applications import is, makes or returns a driver, so that nothing they
// reach bypasses the lease layer (validity, fencing, extension). The
// backend packages return the portable *dsync.Backend.
func TestNoDriverInApplicationAPI(t *testing.T) {
	const mod = "github.com/dsync-dev/dsync"
	app := []string{mod, mod + "/locker", mod + "/semaphore", mod + "/leader",
		mod + "/backends/redis", mod + "/backends/etcd", mod + "/backends/memory", mod + "/redlock"}
	imp := exportImporter(t, app...)
	spi, err := imp.Import(mod + "/backends")
	if err != nil {
		t.Fatal(err)
	}
	driver := spi.Scope().Lookup("Driver").Type().Underlying().(*types.Interface)
	isDriver := func(typ types.Type) bool {
		if types.IsInterface(typ) {
			return types.Identical(typ.Underlying(), driver)
		}
		return types.Implements(typ, driver) || types.Implements(types.NewPointer(typ), driver)
	}
	for _, path := range app {
		pkg, err := imp.Import(path)
		if err != nil {
			t.Fatal(err)
		}
		check := func(what string, sig *types.Signature) {
			for v := range sig.Results().Variables() {
				if isDriver(v.Type()) {
					t.Errorf("%s returns a driver (%s)", what, v.Type())
				}
			}
		}
		for _, name := range pkg.Scope().Names() {
			obj := pkg.Scope().Lookup(name)
			if !obj.Exported() {
				continue
			}
			switch obj := obj.(type) {
			case *types.TypeName:
				if isDriver(obj.Type()) {
					t.Errorf("%s.%s is a driver", path, name)
				}
				if named, ok := obj.Type().(*types.Named); ok {
					for m := range named.Methods() {
						if m.Exported() {
							check(path+"."+name+"."+m.Name(), m.Signature())
						}
					}
				}
			case *types.Func:
				check(path+"."+name, obj.Signature())
			}
		}
	}
}

// exportImporter returns an importer of pkgs and their dependencies, from
// the compiler's export data (go list -export), which the build cache
// keeps.
func exportImporter(t *testing.T, pkgs ...string) types.Importer {
	t.Helper()
	args := append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}, pkgs...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	files := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, "\t"); ok && file != "" {
			files[path] = file
		}
	}
	return importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := files[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
}

package dsync_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ourTooling are the module paths (prefixes) of what this repository's
// tests, tools, examples and benchmarks use beside the library: no user's
// go.sum may carry their code because of dsync.
var ourTooling = []string{
	"github.com/Shopify/toxiproxy", "github.com/anishathalye/porcupine", "github.com/rs/zerolog",
	"github.com/jackc/pgx", "modernc.org/sqlite", "gonum.org/v1/plot", "github.com/go-redsync",
	"github.com/bsm/redislock", "go.opentelemetry.io/otel/exporters/prometheus",
	"go.opentelemetry.io/otel/exporters/stdout",
}

// heavyModules add to ourTooling what a Redis user's build list must not
// carry either: the etcd server and what it links (telemetry SDKs and
// exporters, Prometheus), and goleak.
var heavyModules = append([]string{
	"go.etcd.io/etcd/server", "go.etcd.io/raft", "go.etcd.io/bbolt",
	"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", "go.opentelemetry.io/contrib",
	"github.com/prometheus/", "go.uber.org/goleak", "gonum.org/",
}, ourTooling...)

// userModule writes a module whose main.go is body, requiring this
// repository's modules mods (each path => its directory) through replace
// directives, runs go mod tidy and go build in it without the workspace,
// and returns its build list and go.sum.
func userModule(t *testing.T, mods map[string]string, body string) (buildList []string, goSum string) {
	t.Helper()
	dir := t.TempDir()
	var gomod strings.Builder
	gomod.WriteString("module example.com/user\n\ngo 1.26.0\n\n")
	for path, d := range mods {
		gomod.WriteString("require " + path + " v0.0.0-00010101000000-000000000000\n")
		gomod.WriteString("replace " + path + " => " + d + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s in a user's module: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	run("build", "-o", os.DevNull, ".")
	buildList = strings.Fields(run("list", "-m", "-f", "{{.Path}}", "all"))
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	return buildList, string(sum)
}

// checkBuildList fails on any of the modules bad in the build list.
func checkBuildList(t *testing.T, who string, buildList, bad []string) {
	t.Helper()
	for _, m := range buildList {
		for _, h := range bad {
			if strings.HasPrefix(m, h) {
				t.Errorf("%s: %s is in the build list", who, m)
			}
		}
	}
}

// checkSum fails on a content hash in go.sum of any of the modules bad:
// code a user's build downloads and a reviewer reads as a dependency.
func checkSum(t *testing.T, who string, goSum string, bad []string) {
	t.Helper()
	for _, line := range strings.Split(goSum, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasSuffix(f[1], "/go.mod") {
			continue
		}
		for _, h := range bad {
			if strings.HasPrefix(f[0], h) {
				t.Errorf("%s: go.sum has the content hash of %s %s", who, f[0], f[1])
			}
		}
	}
}

// TestUserBuildListIsLean is what a user's go.mod and go.sum see: a
// program importing the application API and the Redis backend has at most
// 30 modules in its build list and none of test tooling, server code,
// telemetry SDKs or drivers; a program using the etcd backend (a module of
// its own) gets none of our test tooling, drivers or benchmark peers. The
// Redis program's build list still names
// testify and a few other test dependencies of go-redis and OpenTelemetry
// (their go.mod files, not their code): that is theirs, not ours.
func TestUserBuildListIsLean(t *testing.T) {
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	const app = `package main

import (
	"context"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/redis"
	"github.com/dsync-dev/dsync/locker"
)

func main() {
	b, err := dsync.Open(context.Background(), "redis://127.0.0.1:6379")
	if err != nil {
		panic(err)
	}
	defer b.Close()
	if _, err := locker.New(b, "k", nil); err != nil {
		panic(err)
	}
}
`
	list, sum := userModule(t, map[string]string{"github.com/dsync-dev/dsync": root}, app)
	t.Logf("a Redis user's build list: %d modules", len(list))
	if len(list) > 30 {
		t.Errorf("a program importing dsync, locker and backends/redis has %d modules in its build list, more than 30:\n%s",
			len(list), strings.Join(list, "\n"))
	}
	checkBuildList(t, "Redis user", list, heavyModules)
	checkSum(t, "Redis user", sum, heavyModules)

	etcdApp := strings.Replace(app, `_ "github.com/dsync-dev/dsync/backends/redis"`, `_ "github.com/dsync-dev/dsync/backends/etcd"`, 1)
	etcdApp = strings.Replace(etcdApp, "redis://127.0.0.1:6379", "etcd://127.0.0.1:2379", 1)
	list, sum = userModule(t, map[string]string{
		"github.com/dsync-dev/dsync":                           root,
		"github.com/dsync-dev/dsync/backends/etcd":             filepath.Join(root, "backends", "etcd"),
		"github.com/dsync-dev/dsync/internal/testenv/etcdtest": filepath.Join(root, "internal", "testenv", "etcdtest"),
	}, etcdApp)
	// backends/etcd's own tests embed an etcd server, and go mod tidy
	// records the checksums of what the tests of a user's dependencies
	// import: an etcd user's go.sum names the server and what it links
	// (never built into the program). Nothing else of ours.
	t.Logf("an etcd user's build list: %d modules", len(list))
	checkBuildList(t, "etcd user", list, ourTooling)
	checkSum(t, "etcd user", sum, ourTooling)
}

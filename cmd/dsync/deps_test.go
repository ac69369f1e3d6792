package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestLinksNoServerCode keeps the operator tool free of server code and test
// tooling: the embedded etcd server, internal/testenv and tests/torture
// belong to cmd/dsync-demo.
func TestLinksNoServerCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := regexp.MustCompile(`etcd/server|internal/testenv|tests/torture`)
	var bad []string
	for _, pkg := range strings.Fields(string(out)) {
		if forbidden.MatchString(pkg) {
			bad = append(bad, pkg)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("cmd/dsync links server code or test tooling:\n%s", strings.Join(bad, "\n"))
	}
}

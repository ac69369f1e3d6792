package backendtest

import (
	"testing"

	"github.com/dsync-dev/dsync"
)

// CheckScheme fails t unless the URL scheme name is registered, every one
// of its options has a default and a doc (what dsync url-help prints), and
// each of required is among them. It returns the scheme's option names, for
// checks of the caller's own.
func CheckScheme(t testing.TB, name string, required ...string) map[string]bool {
	t.Helper()
	for _, s := range dsync.Schemes() {
		if s.Name != name {
			continue
		}
		has := map[string]bool{}
		for _, o := range s.Options {
			if o.Default == "" || o.Doc == "" {
				t.Errorf("%s option %s lacks a default or a doc", name, o.Name)
			}
			has[o.Name] = true
		}
		for _, o := range required {
			if !has[o] {
				t.Errorf("%s does not list option %s", name, o)
			}
		}
		return has
	}
	t.Errorf("scheme %s not registered", name)
	return nil
}

package backendtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
)

// CheckScheme fails t unless the URL scheme name is registered, every one
// of its options has a default and a doc (what dsync url-help prints), and
// each of required is among them. It returns the scheme's option names, for
// checks of the caller's own.
func CheckScheme(t testing.TB, name string, required ...string) map[string]bool {
	t.Helper()
	for _, s := range backends.Schemes() {
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

// URLCase is a URL dsync.Open must refuse, and what its error must say.
type URLCase struct{ URL, Text string }

// CheckBadURLs fails t unless dsync.Open refuses, with an *InvalidError
// saying what is wrong, at once and before any dial, each malformed URL
// made from pattern, a URL of the scheme with HOST where one server
// address goes: HOST replaced by an address whose port is out of range (0,
// 65536, 99999; the error names the port) or an IPv6 address without
// brackets (the error suggests them), and an unknown and a repeated
// option; and each of more.
func CheckBadURLs(t *testing.T, pattern string, more ...URLCase) {
	t.Helper()
	if !strings.Contains(pattern, "HOST") {
		t.Fatalf("backendtest: URL pattern %q has no HOST", pattern)
	}
	with := func(host, query string) string {
		u := strings.Replace(pattern, "HOST", host, 1)
		if query == "" {
			return u
		}
		if strings.Contains(u, "?") {
			return u + "&" + query
		}
		if i := strings.Index(u, "://"); !strings.Contains(u[i+3:], "/") {
			u += "/"
		}
		return u + "?" + query
	}
	cases := []URLCase{
		{with("127.0.0.1:0", ""), `port "0" is not a number in 1..65535`},
		{with("127.0.0.1:65536", ""), `port "65536"`},
		{with("127.0.0.1:99999", ""), `port "99999"`},
		{with("::1:6379", ""), "needs brackets, as in [::1]:6379"},
		{with("0::1:6380", ""), "needs brackets, as in [0::1]:6380"},
		{with("127.0.0.1:1", "bogus=1"), `"bogus"`},
		{with("127.0.0.1:1", "ttl=1s&ttl=2s"), "more than once"},
	}
	for _, c := range append(cases, more...) {
		t.Run(c.URL, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			b, err := dsync.Open(ctx, c.URL)
			if err == nil {
				_ = b.Close()
				t.Fatal("Open succeeded")
			}
			var ie *dsync.InvalidError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.Text) {
				t.Errorf("Open: %v; want an *InvalidError saying %q", err, c.Text)
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("Open took %v: it refused the URL after dialling, not before", took)
			}
		})
	}
}

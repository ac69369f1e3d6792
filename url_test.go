package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/memory"
)

// The "urltest" scheme opens a memory driver, or fails echoing the URL it
// was given (password included) when the host is "fail", as a careless
// driver might.
var lastURL *url.URL

func init() {
	dsync.Register(dsync.Scheme{
		Name:    "urltest",
		Summary: "test scheme",
		Options: []dsync.OptionDoc{{Name: "flavour", Default: "plain", Doc: "test option"}, {Name: "addr", Repeatable: true}, {Name: "apikey", Secret: true}},
		OpenDriver: func(ctx context.Context, u *url.URL, _ dsync.Telemetry) (backends.Driver, error) {
			lastURL = u
			switch u.Hostname() {
			case "fail":
				return nil, fmt.Errorf("cannot reach %s", u.String())
			case "invalid":
				return nil, backends.Invalid("url", "host %q names no test server", u.Host)
			}
			return memory.New(nil), nil
		},
	})
}

func TestOpenCommonOptions(t *testing.T) {
	b, err := dsync.Open(context.Background(), "urltest://h/?ttl=30s&retry_min=5ms&retry_max=1s&flavour=x&addr=a&addr=b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	want := dsync.Defaults{TTL: 30 * time.Second, RetryMin: 5 * time.Millisecond, RetryMax: time.Second}
	if got := b.Defaults(); got != want {
		t.Fatalf("Defaults = %+v, want %+v", got, want)
	}
	if lastURL.Query().Get("flavour") != "x" {
		t.Fatalf("scheme option not passed to the driver: %v", lastURL)
	}
}

func TestOpenErrors(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want error
		text string // must appear in the message
	}{
		{"redlock://h", dsync.ErrUnknownScheme, `forgotten import of its backend package: _ "github.com/dsync-dev/dsync/redlock"?`},
		{"rediss://h", dsync.ErrUnknownScheme, `_ "github.com/dsync-dev/dsync/backends/redis"?`},
		{"nosuch://h", dsync.ErrUnknownScheme, "registered: "},
		{"nosuch://h", dsync.ErrUnknownScheme, "urltest"},
		{"h:6379", dsync.ErrInvalid, "no scheme"},
		{"127.0.0.1:6379", dsync.ErrInvalid, "did you mean redis://127.0.0.1:6379?"},
		{"urltest://h/?fail=", dsync.ErrInvalid, `"fail"`},
		{"", dsync.ErrInvalid, "no scheme"},
		{"urltest://h:port/", dsync.ErrInvalid, "malformed"},
		{"urltest://h/?colour=red", dsync.ErrInvalid, `"colour"`},
		{"urltest://h/?colour=red", dsync.ErrInvalid, "known: ttl"},
		{"urltest://h/?ttl=1s&ttl=2s", dsync.ErrInvalid, "more than once"},
		{"urltest://h/?ttl=soon", dsync.ErrInvalid, "not a duration"},
		{"urltest://h/?ttl=-1s", dsync.ErrInvalid, "not positive"},
		{"urltest://h/?ttl=0s", dsync.ErrInvalid, "not positive"},
		{"urltest://h/?retry_min=1s&retry_max=10ms", dsync.ErrInvalid, "below retry_min"},
		{"urltest://h/?ttl=1s;x", dsync.ErrInvalid, "malformed query"},
	} {
		b, err := dsync.Open(context.Background(), tc.url)
		if err == nil {
			b.Close()
			t.Errorf("Open(%q) succeeded", tc.url)
			continue
		}
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("Open(%q) = %v; want %v mentioning %q", tc.url, err, tc.want, tc.text)
		}
	}
}

func TestOpenNeverPrintsSecrets(t *testing.T) {
	for _, raw := range []string{
		"urltest://user:hunter2@fail:1/?apikey=k3y-secret",
		"urltest://:hunter2@fail:1/?token=k3y-secret",
		"urltest://user:hunter2@h:port/?apikey=k3y-secret",
		"urltest://user:hunter2@h/?colour=k3y-secret&password=k3y-secret",
		"urltest://user:hunter2@h:99x/",
		"urltest://:hunter2@h:p%zz/",
		"hunter2@h:6379",
	} {
		_, err := dsync.Open(context.Background(), raw)
		if err == nil {
			t.Fatalf("Open(%q) succeeded", raw)
		}
		if msg := err.Error(); strings.Contains(msg, "hunter2") || strings.Contains(msg, "k3y-secret") && !strings.Contains(raw, "colour") {
			t.Errorf("error leaks a secret: %s", msg)
		}
	}
	b, err := dsync.Open(context.Background(), "urltest://user:hunter2@h/?apikey=k3y-secret&flavour=x")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if s := b.String(); strings.Contains(s, "hunter2") || strings.Contains(s, "k3y-secret") || !strings.Contains(s, "flavour=x") {
		t.Errorf("Backend.String() = %q: want secrets redacted and the rest kept", s)
	}
}

// TestOpenErrorSaysOpenOnce: a driver's error that is a dsync error does
// not stutter behind Open's prefix.
func TestOpenErrorSaysOpenOnce(t *testing.T) {
	_, err := dsync.Open(context.Background(), "urltest://invalid/")
	if err == nil {
		t.Fatal("Open succeeded")
	}
	if !errors.Is(err, dsync.ErrInvalid) || strings.Count(err.Error(), "dsync:") != 1 {
		t.Errorf("Open = %q: want one dsync: prefix, matching ErrInvalid", err)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:pw@h:6379/0":              "redis://:xxxxx@h:6379/0",
		"redis://u:pw@h/?password=pw&db=1":  "redis://u:xxxxx@h/?db=1&password=xxxxx",
		"etcd://h1,h2/p?auth_token=abc":     "etcd://h1,h2/p?auth_token=xxxxx",
		"memory://name":                     "memory://name",
		"redis://u:p w@h:bad\x7f":           "redis://(unparsable URL redacted)",
		"redis://user@h":                    "redis://user@h",
		"redlock://a:1,b:2/?addr=%5B::1%5D": "redlock://a:1,b:2/?addr=%5B::1%5D",
	} {
		if got := dsync.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRegisterPanics(t *testing.T) {
	open := func(context.Context, *url.URL, dsync.Telemetry) (backends.Driver, error) { return nil, nil }
	for name, s := range map[string]dsync.Scheme{
		"duplicate":  {Name: "urltest", OpenDriver: open},
		"empty name": {Name: "", OpenDriver: open},
		"upper case": {Name: "Upper", OpenDriver: open},
		"no opener":  {Name: "noopener"},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register %s did not panic", name)
				}
			}()
			dsync.Register(s)
		}()
	}
}

func TestNewBackendRejectsNil(t *testing.T) {
	if _, err := dsync.NewBackend(nil, nil); !errors.Is(err, dsync.ErrInvalid) {
		t.Fatalf("NewBackend(nil): %v, want ErrInvalid", err)
	}
}

// TestHostPort: the one parser of server addresses every scheme uses.
func TestHostPort(t *testing.T) {
	for _, tc := range []struct {
		addr, defaultPort string
		want              string // empty: an *InvalidError containing text
		text              string
	}{
		{addr: "h:6379", want: "h:6379"},
		{addr: "10.0.0.1:7000", defaultPort: "6379", want: "10.0.0.1:7000"},
		{addr: "h", defaultPort: "2379", want: "h:2379"},
		{addr: "[::1]:6379", want: "[::1]:6379"},
		{addr: "[::1]", defaultPort: "2379", want: "[::1]:2379"},
		{addr: "[fe80::1%eth0]:6379", want: "[fe80::1%eth0]:6379"},
		{addr: "h:1", want: "h:1"},
		{addr: "h:65535", want: "h:65535"},
		{addr: "h", text: "no port"},
		{addr: "[::1]", text: "no port"},
		{addr: "", defaultPort: "6379", text: "no host"},
		{addr: ":6379", text: "empty host name"},
		{addr: "h:", defaultPort: "6379", text: "empty port"},
		{addr: "h:0", text: `port "0" is not a number in 1..65535`},
		{addr: "h:65536", text: `port "65536"`},
		{addr: "h:99999", text: `port "99999"`},
		{addr: "h:-1", text: `port "-1"`},
		{addr: "h:http", text: `port "http"`},
		{addr: "::1:6379", text: "needs brackets, as in [::1]:6379"},
		{addr: "0::1:6380", text: "needs brackets, as in [0::1]:6380"},
		{addr: "fe80::1", defaultPort: "2379", text: "needs brackets"},
		{addr: "[::1:6379", text: "malformed"},
		{addr: "[[::1]]:6379", text: "malformed"},
		{addr: "a:1,b:2", text: "a list of hosts"},
	} {
		got, err := dsync.HostPort(tc.addr, tc.defaultPort)
		if tc.want != "" {
			if err != nil || got != tc.want {
				t.Errorf("HostPort(%q, %q) = %q, %v; want %q", tc.addr, tc.defaultPort, got, err, tc.want)
			}
			continue
		}
		var ie *dsync.InvalidError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("HostPort(%q, %q) = %q, %v; want an *InvalidError saying %q", tc.addr, tc.defaultPort, got, err, tc.text)
		}
	}
}

func TestHostList(t *testing.T) {
	for list, want := range map[string][]string{
		"h1":                    {"h1:2379"},
		"a:1,b,[::1]:3":         {"a:1", "b:2379", "[::1]:3"},
		"[::1]:2379,[fe80::1]":  {"[::1]:2379", "[fe80::1]:2379"},
		"10.0.0.1,10.0.0.2:23":  {"10.0.0.1:2379", "10.0.0.2:23"},
		"etcd-0.etcd.svc:12379": {"etcd-0.etcd.svc:12379"},
	} {
		if got, err := dsync.HostList(list, "2379"); err != nil || !slices.Equal(got, want) {
			t.Errorf("HostList(%q) = %q, %v; want %q", list, got, err, want)
		}
	}
	for list, text := range map[string]string{
		"":                  "no host",
		"a:1,,b:2":          "stray comma",
		"a:1,":              "stray comma",
		"a:1,b:99999":       `port "99999"`,
		"0::1:6379,0::1:80": "needs brackets, as in [0::1]:6379",
		",":                 "stray comma",
		":2379":             "empty host name",
		"h1:x":              `port "x"`,
		"h1:70000":          `port "70000"`,
		"[::1":              "malformed",
	} {
		if _, err := dsync.HostList(list, ""); !errors.Is(err, dsync.ErrInvalid) || !strings.Contains(err.Error(), text) {
			t.Errorf("HostList(%q) = %v, want ErrInvalid saying %q", list, err, text)
		}
	}
}

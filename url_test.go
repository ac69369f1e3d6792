package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	_ "github.com/dsync-dev/dsync/backends/memory" // registers memory://
)

// The "urltest" scheme opens a memory driver, or fails echoing the URL it
// was given (password included) when the host is "fail", as a careless
// driver might.
var lastURL *url.URL

func init() {
	backends.Register(backends.Scheme{
		Name:    "urltest",
		Summary: "test scheme",
		Options: []backends.OptionDoc{{Name: "flavour", Default: "plain", Doc: "test option"}, {Name: "addr", Repeatable: true}, {Name: "apikey", Secret: true}},
		OpenDriver: func(ctx context.Context, u *url.URL, t backends.Telemetry) (backends.Driver, error) {
			lastURL = u
			switch u.Hostname() {
			case "fail":
				return nil, fmt.Errorf("cannot reach %s", u.String())
			case "invalid":
				return nil, backends.Invalid("url", "host %q names no test server", u.Host)
			}
			return openMemory(ctx, t)
		},
	})
}

// openMemory opens a memory driver through the memory scheme's opener.
func openMemory(ctx context.Context, t backends.Telemetry) (backends.Driver, error) {
	for _, s := range backends.Schemes() {
		if s.Name == "memory" {
			return s.OpenDriver(ctx, &url.URL{Scheme: "memory", Host: "urltest"}, t)
		}
	}
	return nil, errors.New("the memory scheme is not registered")
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

func TestNewBackendRejectsNil(t *testing.T) {
	if _, err := dsync.NewBackend(nil, nil); !errors.Is(err, dsync.ErrInvalid) {
		t.Fatalf("NewBackend(nil): %v, want ErrInvalid", err)
	}
}

package backends_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/dsync-dev/dsync/backends"
)

func init() {
	backends.Register(backends.Scheme{
		Name:    "schemetest",
		Options: []backends.OptionDoc{{Name: "apikey", Secret: true}},
		OpenDriver: func(context.Context, *url.URL, backends.Telemetry) (backends.Driver, error) {
			return nil, errors.New("not for opening")
		},
	})
}

func TestSchemesListsRegistered(t *testing.T) {
	if !slices.ContainsFunc(backends.Schemes(), func(s backends.Scheme) bool { return s.Name == "schemetest" }) {
		t.Fatalf("Schemes() = %v, want schemetest among them", backends.Schemes())
	}
}

// TestCommonOptionsIsACopy: a caller that changes the slice it got does not
// change what every scheme accepts.
func TestCommonOptionsIsACopy(t *testing.T) {
	o := backends.CommonOptions()
	if len(o) == 0 {
		t.Fatal("no common options")
	}
	o[0].Name = "changed"
	if backends.CommonOptions()[0].Name == "changed" {
		t.Fatal("CommonOptions returned its own slice")
	}
}

func TestIsSecretOption(t *testing.T) {
	for name, want := range map[string]bool{"password": true, "auth_token": true, "apikey": true, "db": false, "prefix": false} {
		if got := backends.IsSecretOption(name); got != want {
			t.Errorf("IsSecretOption(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:pw@h:6379/0":              "redis://:xxxxx@h:6379/0",
		"redis://u:pw@h/?password=pw&db=1":  "redis://u:xxxxx@h/?db=1&password=xxxxx",
		"etcd://h1,h2/p?auth_token=abc":     "etcd://h1,h2/p?auth_token=xxxxx",
		"schemetest://h/?apikey=k&x=1":      "schemetest://h/?apikey=xxxxx&x=1",
		"memory://name":                     "memory://name",
		"redis://u:p w@h:bad\x7f":           "redis://(unparsable URL redacted)",
		"redis://user@h":                    "redis://user@h",
		"redlock://a:1,b:2/?addr=%5B::1%5D": "redlock://a:1,b:2/?addr=%5B::1%5D",
	} {
		if got := backends.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRegisterPanics(t *testing.T) {
	open := func(context.Context, *url.URL, backends.Telemetry) (backends.Driver, error) { return nil, nil }
	for name, s := range map[string]backends.Scheme{
		"duplicate":  {Name: "schemetest", OpenDriver: open},
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
			backends.Register(s)
		}()
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
		got, err := backends.HostPort(tc.addr, tc.defaultPort)
		if tc.want != "" {
			if err != nil || got != tc.want {
				t.Errorf("HostPort(%q, %q) = %q, %v; want %q", tc.addr, tc.defaultPort, got, err, tc.want)
			}
			continue
		}
		var ie *backends.InvalidError
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
		if got, err := backends.HostList(list, "2379"); err != nil || !slices.Equal(got, want) {
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
		if _, err := backends.HostList(list, ""); !errors.Is(err, backends.ErrInvalid) || !strings.Contains(err.Error(), text) {
			t.Errorf("HostList(%q) = %v, want ErrInvalid saying %q", list, err, text)
		}
	}
}

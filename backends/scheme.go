package backends

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Scheme registers a URL scheme with dsync.Open. Backend packages register
// theirs in init(); applications blank-import the backend package, as with
// database/sql drivers.
type Scheme struct {
	// Name is the URL scheme, lower case ("redis").
	Name string
	// Summary is one line for help output.
	Summary string
	// Example is a sample URL for help output.
	Example string
	// Options are the scheme's own query options, beyond CommonOptions.
	// dsync.Open rejects any other option before calling OpenDriver.
	Options []OptionDoc
	// OpenDriver opens the driver. It receives the parsed URL with every
	// query value already checked against Options, and the telemetry
	// settings of the backend being opened, for a driver that observes
	// more than the layer above it sees (Redlock's nodes); it must probe
	// the server with ctx so that an unreachable one fails here, not later,
	// with an error matching ErrUnavailable.
	OpenDriver func(ctx context.Context, u *url.URL, t Telemetry) (Driver, error)
}

// Telemetry is what a driver may use of the telemetry settings of the
// backend it is opened for (dsync.Telemetry): the layer above records
// every lease event itself, so a driver needs these only for what it
// alone sees, such as Redlock's per-node requests and restarts.
type Telemetry struct {
	// MeterProvider makes the driver's own instruments. Nil means
	// otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Logger receives the driver's warnings and notices. Nil: nothing is
	// logged.
	Logger *slog.Logger
}

// OptionDoc documents one URL query option.
type OptionDoc struct {
	Name    string
	Default string
	Doc     string
	// Repeatable options may appear more than once.
	Repeatable bool
	// Secret options are redacted from messages.
	Secret bool
}

// commonOptions are the query options every scheme accepts.
var commonOptions = []OptionDoc{
	{Name: "ttl", Default: "10s (locker default)", Doc: "lease time to live, a Go duration such as 30s"},
	{Name: "retry_min", Default: "10ms (locker default)", Doc: "smallest delay between acquisition attempts (jittered)"},
	{Name: "retry_max", Default: "200ms (locker default)", Doc: "largest delay between acquisition attempts (jittered)"},
}

// CommonOptions returns the query options every scheme accepts, which set
// the backend's defaults (dsync.Defaults); dsync.Open takes them out of a
// scheme's hands: a driver ignores them.
func CommonOptions() []OptionDoc { return slices.Clone(commonOptions) }

var (
	schemesMu sync.RWMutex
	schemes   = map[string]Scheme{} // protected by schemesMu
)

// Register makes a scheme available to dsync.Open. It panics if the scheme
// is malformed or already registered: both are programming errors.
func Register(s Scheme) {
	if s.Name == "" || s.Name != strings.ToLower(s.Name) || s.OpenDriver == nil {
		panic(fmt.Sprintf("dsync: Register of malformed scheme %q (lower-case name and OpenDriver required)", s.Name))
	}
	schemesMu.Lock()
	defer schemesMu.Unlock()
	if _, dup := schemes[s.Name]; dup {
		panic("dsync: Register called twice for scheme " + s.Name)
	}
	schemes[s.Name] = s
}

// Schemes lists the registered schemes, sorted by name.
func Schemes() []Scheme {
	schemesMu.RLock()
	defer schemesMu.RUnlock()
	out := make([]Scheme, 0, len(schemes))
	for _, s := range schemes {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ParseDurationOption parses a positive Go duration given as URL option name.
func ParseDurationOption(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, &InvalidError{Field: "url option " + strconv.Quote(name), Reason: fmt.Sprintf("%q is not a duration such as 500ms or 30s", v)}
	}
	if d <= 0 {
		return 0, &InvalidError{Field: "url option " + strconv.Quote(name), Reason: d.String() + " is not positive"}
	}
	return d, nil
}

// HostPort checks one server address of a URL and returns it as host:port
// ([host]:port for an IPv6 address), for the schemes' OpenDriver. It
// takes host:port or [IPv6]:port and, when defaultPort is not empty, host
// or [IPv6] alone, which get defaultPort. An empty host, a port that is not
// a number in 1..65535, a missing port where one is needed, and an IPv6
// address without brackets (malformed: "::1:6379" could end in a port or
// not) are *InvalidError values naming the address, before any dial.
func HostPort(addr, defaultPort string) (string, error) {
	bad := func(format string, args ...any) error {
		return &InvalidError{Field: "url", Reason: fmt.Sprintf("host %q: ", addr) + fmt.Sprintf(format, args...)}
	}
	switch {
	case addr == "":
		return "", &InvalidError{Field: "url", Reason: "no host"}
	case strings.Contains(addr, ","):
		return "", bad("a list of hosts where one is expected")
	}
	host, port, err := net.SplitHostPort(addr)
	switch {
	case err == nil && port == "":
		return "", bad("empty port")
	case err == nil:
	case strings.HasPrefix(addr, "[") && strings.HasSuffix(addr, "]"):
		host = addr[1 : len(addr)-1] // [IPv6] without a port
	case strings.Count(addr, ":") > 1 && !strings.Contains(addr, "["):
		h, p := addr, cmp.Or(defaultPort, "PORT")
		if i := strings.LastIndex(addr, ":"); isDigits(addr[i+1:]) {
			h, p = addr[:i], addr[i+1:]
		}
		return "", bad("an IPv6 address needs brackets, as in [%s]:%s", h, p)
	case !strings.ContainsAny(addr, ":[]"):
		host = addr // a name or IPv4 address without a port
	default:
		return "", bad("malformed: %v", err)
	}
	switch {
	case host == "":
		return "", bad("empty host name")
	case strings.ContainsAny(host, "[]"):
		return "", bad("malformed")
	case port == "" && defaultPort == "":
		return "", bad("no port (want host:port)")
	case port == "":
		port = defaultPort
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", bad("port %q is not a number in 1..65535", port)
	}
	return net.JoinHostPort(host, port), nil
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// HostList splits a URL's comma-separated host list (url.URL.Host for the
// schemes that name several servers) and checks each address with
// HostPort. An empty list or entry is an *InvalidError too.
func HostList(list, defaultPort string) ([]string, error) {
	if list == "" {
		return nil, &InvalidError{Field: "url", Reason: "no host"}
	}
	var addrs []string
	for i, h := range strings.Split(list, ",") {
		if h == "" {
			return nil, &InvalidError{Field: "url", Reason: fmt.Sprintf("host %d of the list %q is empty (a stray comma?)", i, list)}
		}
		a, err := HostPort(h, defaultPort)
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// secretOptionNames are redacted from any URL, whatever its scheme.
var secretOptionNames = []string{"password", "token", "secret", "auth"}

// RedactURL returns rawURL with its password and the values of secret query
// options (see IsSecretOption) replaced by "xxxxx". A URL that does not
// parse is reduced to its scheme, so that nothing secret can leak from it.
func RedactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		if i := strings.Index(rawURL, "://"); i > 0 && !strings.ContainsAny(rawURL[:i], "@:/") {
			return rawURL[:i] + "://(unparsable URL redacted)"
		}
		return "(unparsable URL redacted)"
	}
	changed := false
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			changed = true
		}
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			u.RawQuery = "(redacted)"
			changed = true
		} else {
			secret := false
			for k := range q {
				if IsSecretOption(k) {
					q[k] = []string{"xxxxx"}
					secret = true
				}
			}
			if secret {
				u.RawQuery = q.Encode()
				changed = true
			}
		}
	}
	if !changed {
		return rawURL // u.String() would turn "memory://" into "memory:"
	}
	return u.String()
}

// IsSecretOption reports whether the values of the URL query option name
// are never printed: any whose name contains password, token, secret or
// auth, and any a registered scheme marks Secret.
func IsSecretOption(name string) bool {
	lower := strings.ToLower(name)
	if slices.ContainsFunc(secretOptionNames, func(s string) bool { return strings.Contains(lower, s) }) {
		return true
	}
	schemesMu.RLock()
	defer schemesMu.RUnlock()
	for _, s := range schemes {
		for _, o := range s.Options {
			if o.Secret && o.Name == name {
				return true
			}
		}
	}
	return false
}

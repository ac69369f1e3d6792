package dsync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsync-dev/dsync/backends"
)

// Scheme registers a URL scheme with Open. Backend packages register theirs
// in init(); applications blank-import the backend package, as with
// database/sql drivers.
type Scheme struct {
	// Name is the URL scheme, lower case ("redis").
	Name string
	// Summary is one line for help output.
	Summary string
	// Example is a sample URL for help output.
	Example string
	// Options are the scheme's own query options, beyond CommonOptions.
	// Open rejects any other option before calling OpenDriver.
	Options []OptionDoc
	// OpenDriver opens the driver. It receives the parsed URL with every
	// query value already checked against Options, and the telemetry
	// settings of the backend being opened, for a driver that observes
	// more than the layer above it sees (Redlock's nodes); it must probe
	// the server with ctx so that an unreachable one fails here, not later.
	OpenDriver func(ctx context.Context, u *url.URL, t Telemetry) (backends.Driver, error)
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

// CommonOptions are the query options every scheme accepts; they set the
// Backend's Defaults.
var CommonOptions = []OptionDoc{
	{Name: "ttl", Default: "10s (locker default)", Doc: "lease time to live, a Go duration such as 30s"},
	{Name: "retry_min", Default: "10ms (locker default)", Doc: "smallest delay between acquisition attempts (jittered)"},
	{Name: "retry_max", Default: "200ms (locker default)", Doc: "largest delay between acquisition attempts (jittered)"},
}

var (
	schemesMu sync.RWMutex
	schemes   = map[string]Scheme{} // protected by schemesMu
)

// Register makes a scheme available to Open. It panics if the scheme is
// malformed or already registered: both are programming errors.
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

// Open opens the backend a URL names:
//
//	redis://[:password@]host:6379[/db]    rediss:// for TLS
//	redlock://h1:6379,h2:6379,h3:6379[/db]
//	etcd://h1:2379,h2:2379[/prefix]
//	memory://name
//
// with query options (?ttl=30s&...). The scheme's backend package must be
// imported (usually blank-imported) to register it. A malformed URL or an
// unknown option is an *InvalidError, an unregistered scheme matches
// ErrUnknownScheme, and an unreachable server fails here within ctx. No error
// or message contains the URL's password or secret options.
func Open(ctx context.Context, rawURL string) (*Backend, error) {
	return OpenWith(ctx, rawURL, nil)
}

// OpenWith is Open with options: opts.Telemetry chooses where the
// backend's metrics, spans and log lines go (see Telemetry), opts.Name
// replaces the redacted URL as the backend's name, and opts.Defaults apply
// where the URL sets nothing. A nil opts is Open.
func OpenWith(ctx context.Context, rawURL string, opts *BackendOptions) (*Backend, error) {
	if opts == nil {
		opts = &BackendOptions{}
	}
	if !strings.Contains(rawURL, "://") {
		return nil, noScheme(rawURL)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the whole URL, password included.
		return nil, &InvalidError{Field: "url", Reason: "malformed: " + redactParseError(rawURL, err)}
	}
	if u.Scheme == "" || !strings.Contains(rawURL, "://") {
		return nil, noScheme(rawURL)
	}
	name := strings.ToLower(u.Scheme)
	schemesMu.RLock()
	s, ok := schemes[name]
	schemesMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q (registered: %s%s)",
			ErrUnknownScheme, name, strings.Join(schemeNames(), ", "), importHint(name))
	}
	redacted := RedactURL(rawURL)
	defaults, err := checkQuery(u, s)
	if err != nil {
		return nil, err
	}
	if defaults.TTL == 0 {
		defaults.TTL = opts.Defaults.TTL
	}
	if defaults.RetryMin == 0 {
		defaults.RetryMin = opts.Defaults.RetryMin
	}
	if defaults.RetryMax == 0 {
		defaults.RetryMax = opts.Defaults.RetryMax
	}
	backendName := opts.Name
	if backendName == "" {
		backendName = redacted
	}
	d, err := s.OpenDriver(ctx, u, opts.Telemetry)
	if err != nil {
		return nil, &openError{url: redacted, err: err, secrets: secretsOf(u)}
	}
	b, err := NewBackend(d, &BackendOptions{Name: backendName, Defaults: defaults, Telemetry: opts.Telemetry})
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return b, nil
}

// noScheme is the error of a URL without a scheme; a bare host:port (the
// most common slip) gets a suggestion.
func noScheme(rawURL string) error {
	reason := fmt.Sprintf("%q has no scheme (want one of %s)", RedactURL(rawURL), strings.Join(schemeNames(), ", "))
	if host, port, err := net.SplitHostPort(rawURL); err == nil && host != "" && port != "" && !strings.ContainsAny(rawURL, "@/?# ") {
		reason = fmt.Sprintf("%q has no scheme: did you mean redis://%s? (schemes: %s)", rawURL, rawURL, strings.Join(schemeNames(), ", "))
	}
	return &InvalidError{Field: "url", Reason: reason}
}

func schemeNames() []string {
	var names []string
	for _, s := range Schemes() {
		names = append(names, s.Name)
	}
	if len(names) == 0 {
		return []string{"none"}
	}
	return names
}

// checkQuery rejects unknown or repeated options and parses the common ones.
func checkQuery(u *url.URL, s Scheme) (Defaults, error) {
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Defaults{}, &InvalidError{Field: "url", Reason: "malformed query: " + err.Error()}
	}
	known := map[string]OptionDoc{}
	for _, o := range CommonOptions {
		known[o.Name] = o
	}
	for _, o := range s.Options {
		known[o.Name] = o
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		o, ok := known[k]
		if !ok {
			return Defaults{}, &InvalidError{Field: "url option " + strconvQuote(k), Reason: "unknown for scheme " + s.Name + " (known: " + strings.Join(optionNames(s), ", ") + ")"}
		}
		if len(q[k]) > 1 && !o.Repeatable {
			return Defaults{}, &InvalidError{Field: "url option " + strconvQuote(k), Reason: "given more than once"}
		}
	}
	var d Defaults
	for _, f := range []struct {
		name string
		dst  *time.Duration
	}{{"ttl", &d.TTL}, {"retry_min", &d.RetryMin}, {"retry_max", &d.RetryMax}} {
		if !q.Has(f.name) {
			continue
		}
		v, err := ParseDurationOption(f.name, q.Get(f.name))
		if err != nil {
			return Defaults{}, err
		}
		*f.dst = v
	}
	return d, d.validate()
}

// ParseDurationOption parses a positive Go duration given as URL option name.
func ParseDurationOption(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, &InvalidError{Field: "url option " + strconvQuote(name), Reason: fmt.Sprintf("%q is not a duration such as 500ms or 30s", v)}
	}
	if d <= 0 {
		return 0, &InvalidError{Field: "url option " + strconvQuote(name), Reason: d.String() + " is not positive"}
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

func optionNames(s Scheme) []string {
	var names []string
	for _, o := range CommonOptions {
		names = append(names, o.Name)
	}
	for _, o := range s.Options {
		names = append(names, o.Name)
	}
	return names
}

func strconvQuote(s string) string { return fmt.Sprintf("%q", s) }

// secretOptionNames are redacted from any URL, whatever its scheme.
var secretOptionNames = []string{"password", "token", "secret", "auth"}

// RedactURL returns rawURL with its password and the values of secret query
// options (password, token, ...) replaced by "xxxxx". A URL that does not
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
				if isSecretOption(k) {
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

// isSecretOption reports options whose values are never printed: any whose
// name contains password, token, secret or auth, and any a registered
// scheme marks Secret.
func isSecretOption(name string) bool {
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

// secretsOf lists the secret strings a URL carries, to scrub from messages.
func secretsOf(u *url.URL) []string {
	var out []string
	if u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			out = append(out, p)
		}
	}
	q, _ := url.ParseQuery(u.RawQuery)
	for k, vs := range q {
		if isSecretOption(k) {
			for _, v := range vs {
				if v != "" {
					out = append(out, v)
				}
			}
		}
	}
	return out
}

// redactParseError words the error of a URL that did not parse, whose
// password url.Parse could not extract: it is cut out of the raw text.
func redactParseError(rawURL string, err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := err.Error()
	if p := rawPassword(rawURL); p != "" {
		msg = strings.ReplaceAll(msg, p, "xxxxx")
	}
	return msg + " (in " + RedactURL(rawURL) + ")"
}

// rawPassword is the text between the first ":" and the last "@" of a
// URL's authority, found without parsing.
func rawPassword(rawURL string) string {
	_, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	_, pw, _ := strings.Cut(rest[:at], ":")
	return pw
}

// openError is the error of a driver that failed to open: it names the
// URL, redacted, and scrubs the URL's secrets from the driver's message
// while keeping it unwrappable, so that a driver error that echoes a
// password cannot leak it.
type openError struct {
	url     string
	err     error
	secrets []string
}

func (e *openError) Error() string {
	msg := "dsync: open " + e.url + ": " + strings.TrimPrefix(e.err.Error(), "dsync: ")
	for _, s := range e.secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return msg
}

func (e *openError) Unwrap() error { return e.err }

// builtinPackages are the packages of this module's schemes, by scheme.
var builtinPackages = map[string]string{
	"redis":   "github.com/dsync-dev/dsync/backends/redis",
	"rediss":  "github.com/dsync-dev/dsync/backends/redis",
	"redlock": "github.com/dsync-dev/dsync/redlock",
	"etcd":    "github.com/dsync-dev/dsync/backends/etcd",
	"memory":  "github.com/dsync-dev/dsync/backends/memory",
}

// importHint names the import that registers scheme, for one of this
// module's schemes; nothing for another (its package is not known here).
func importHint(scheme string) string {
	if p, ok := builtinPackages[scheme]; ok {
		return fmt.Sprintf("; forgotten import of its backend package: _ %q?", p)
	}
	return ""
}

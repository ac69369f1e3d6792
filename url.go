package dsync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/dsync-dev/dsync/backends"
)

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
// ErrUnknownScheme, and an unreachable server fails here within ctx, with
// an error matching ErrUnavailable (redis, redlock, etcd). No error
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
	s, ok := lookupScheme(name)
	if !ok {
		return nil, fmt.Errorf("%w %q (registered: %s%s)",
			ErrUnknownScheme, name, strings.Join(schemeNames(), ", "), importHint(name))
	}
	redacted := backends.RedactURL(rawURL)
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
	d, err := s.OpenDriver(ctx, u, backends.Telemetry{MeterProvider: opts.Telemetry.MeterProvider, Logger: opts.Telemetry.Logger})
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
	reason := fmt.Sprintf("%q has no scheme (want one of %s)", backends.RedactURL(rawURL), strings.Join(schemeNames(), ", "))
	if host, port, err := net.SplitHostPort(rawURL); err == nil && host != "" && port != "" && !strings.ContainsAny(rawURL, "@/?# ") {
		reason = fmt.Sprintf("%q has no scheme: did you mean redis://%s? (schemes: %s)", rawURL, rawURL, strings.Join(schemeNames(), ", "))
	}
	return &InvalidError{Field: "url", Reason: reason}
}

// lookupScheme returns the registered scheme called name.
func lookupScheme(name string) (backends.Scheme, bool) {
	for _, s := range backends.Schemes() {
		if s.Name == name {
			return s, true
		}
	}
	return backends.Scheme{}, false
}

func schemeNames() []string {
	var names []string
	for _, s := range backends.Schemes() {
		names = append(names, s.Name)
	}
	if len(names) == 0 {
		return []string{"none"}
	}
	return names
}

// checkQuery rejects unknown or repeated options and parses the common ones.
func checkQuery(u *url.URL, s backends.Scheme) (Defaults, error) {
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Defaults{}, &InvalidError{Field: "url", Reason: "malformed query: " + err.Error()}
	}
	known := map[string]backends.OptionDoc{}
	for _, o := range backends.CommonOptions() {
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
		v, err := backends.ParseDurationOption(f.name, q.Get(f.name))
		if err != nil {
			return Defaults{}, err
		}
		*f.dst = v
	}
	return d, d.validate()
}

func optionNames(s backends.Scheme) []string {
	var names []string
	for _, o := range backends.CommonOptions() {
		names = append(names, o.Name)
	}
	for _, o := range s.Options {
		names = append(names, o.Name)
	}
	return names
}

func strconvQuote(s string) string { return fmt.Sprintf("%q", s) }

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
		if backends.IsSecretOption(k) {
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
	return msg + " (in " + backends.RedactURL(rawURL) + ")"
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

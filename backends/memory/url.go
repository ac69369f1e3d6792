package memory

import (
	"context"
	"net/url"

	"github.com/dsync-dev/dsync/backends"
)

func init() {
	backends.Register(backends.Scheme{
		Name:       "memory",
		Summary:    "in-process store for tests and development (not distributed)",
		Example:    "memory://demo",
		OpenDriver: openURL,
	})
}

// openURL opens a driver on the named store memory://name.
func openURL(ctx context.Context, u *url.URL, _ backends.Telemetry) (backends.Driver, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch {
	case u.Opaque != "" || u.Host == "":
		return nil, backends.Invalid("url", "memory URL needs a store name, as in memory://demo")
	case u.Port() != "":
		return nil, backends.Invalid("url", "memory URL takes a store name, not host:port (%q): a memory store lives in this process", u.Host)
	case u.User != nil:
		return nil, backends.Invalid("url", "memory URL takes no user information")
	case u.Path != "" && u.Path != "/":
		return nil, backends.Invalid("url", "memory URL takes no path (%q), only a store name", u.Path)
	}
	return newDriver(Named(u.Host)), nil
}

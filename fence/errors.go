package fence

import (
	"errors"
	"fmt"
	"math"

	"github.com/dsync-dev/dsync"
)

// ErrStale is the error of a write refused by a guard: its token is below
// the largest the resource has accepted for the name, so a newer holder
// has written since. Nothing was written. The error says both tokens.
var ErrStale = errors.New("dsync: fence: stale token")

// invalidError is bad input to a guard, found before any I/O. It matches
// dsync.ErrInvalid.
type invalidError struct{ what, why string }

func (e *invalidError) Error() string        { return "dsync: fence: invalid " + e.what + ": " + e.why }
func (e *invalidError) Is(target error) bool { return target == dsync.ErrInvalid }

func invalid(what, format string, args ...any) error {
	return &invalidError{what: what, why: fmt.Sprintf(format, args...)}
}

// checkWrite checks the name and token of a guarded write; max is the
// largest token the store can hold.
func checkWrite(name string, token, max uint64) error {
	if name == "" {
		return invalid("name", "empty")
	}
	if token == 0 {
		return invalid("token", "0: the lease has no fencing token (NoFencing, or a backend without fencing), and a guard cannot order it")
	}
	if token > max {
		return invalid("token", "%d is above %d, the largest this store holds", token, max)
	}
	return nil
}

// stale is the error of a write refused with token when the resource has
// accepted cur for name.
func stale(name string, token, cur uint64) error {
	return fmt.Errorf("%w: %q: token %d is below %d, the largest the resource has accepted", ErrStale, name, token, cur)
}

const maxInt64 = math.MaxInt64

package backends

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Sentinel errors shared by drivers and the portable types above them. The
// root package dsync re-exports each one under the same name, so that
// errors.Is works whichever package a caller imports.
var (
	// ErrNotAcquired: the hold was not obtained (taken by another owner, no
	// slot free, the backend could not decide (ErrUnavailable as well), or
	// the caller gave up).
	ErrNotAcquired = errors.New("dsync: not acquired")
	// ErrUnavailable: the backend could not decide, or its answer is
	// unknown: no answer in time, a broken connection, no quorum of nodes.
	// See Driver.Acquire for what it means there.
	ErrUnavailable = errors.New("dsync: backend unavailable")
	// ErrNotHeld: the hold is not (or no longer) owned by this token.
	ErrNotHeld = errors.New("dsync: not held")
	// ErrClosed: the driver or backend was closed.
	ErrClosed = errors.New("dsync: closed")
	// ErrUnsupported: the backend cannot do what was asked (a semaphore on a
	// driver whose MaxLimit is 1, for instance).
	ErrUnsupported = errors.New("dsync: unsupported")
	// ErrInvalid: an argument, option or URL is invalid. Errors that match
	// it are *InvalidError values naming the problem.
	ErrInvalid = errors.New("dsync: invalid argument")
)

// InvalidError reports a bad argument, option or URL before any I/O is made.
// It matches ErrInvalid with errors.Is.
type InvalidError struct {
	// Field names what is wrong ("key", "ttl", "url", option "prefix"...).
	Field string
	// Reason says why, in a few words.
	Reason string
}

func (e *InvalidError) Error() string {
	return "dsync: invalid " + e.Field + ": " + e.Reason
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Invalid returns an *InvalidError for field with a formatted reason.
func Invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// LimitMismatch is the error of an Acquire whose limit differs from the
// limit of the key's live holds: two configurations of one semaphore
// disagree on its size. It matches ErrInvalid; it is never retried.
func LimitMismatch(key string, limit, holders int) error {
	return Invalid("size", "%d disagrees with the size %d of the current holders of %q (a lock has size 1)", limit, holders, key)
}

// CheckRequest validates req against caps. Drivers call it first so that
// every backend rejects the same bad input with the same error, before any
// I/O.
func CheckRequest(req Request, caps Capabilities) error {
	if err := CheckKey(req.Key); err != nil {
		return err
	}
	if req.Token == "" {
		return Invalid("token", "empty")
	}
	if err := CheckTTL(req.TTL, caps); err != nil {
		return err
	}
	if req.Limit < 0 {
		return Invalid("limit", "%d is negative", req.Limit)
	}
	if req.Limit > max(caps.MaxLimit, 1) {
		if caps.MaxLimit <= 1 {
			return fmt.Errorf("%w: %s backend offers locks only (limit %d requested)", ErrUnsupported, caps.Name, req.Limit)
		}
		return Invalid("limit", "%d exceeds the %s backend's maximum of %d", req.Limit, caps.Name, caps.MaxLimit)
	}
	if len(req.Value) > MaxValueSize {
		return Invalid("value", "%d bytes exceeds the maximum of %d", len(req.Value), MaxValueSize)
	}
	return CheckWaiter(req.Waiter)
}

// CheckWaiter validates a waiter's name (Request.Waiter): at most
// MaxWaiterSize bytes of digits, lower-case letters and '-', so that a
// driver can put it in a key name as it is. Empty is valid (no waiter).
func CheckWaiter(w string) error {
	if len(w) > MaxWaiterSize {
		return Invalid("waiter", "%d bytes exceeds the maximum of %d", len(w), MaxWaiterSize)
	}
	for i := 0; i < len(w); i++ {
		if c := w[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || c == '-') {
			return Invalid("waiter", "byte %#x at %d is not one of [0-9a-z-]", c, i)
		}
	}
	return nil
}

// CheckKey validates a key (the name of a lock, semaphore or election):
// not empty, at most MaxKeySize bytes, valid UTF-8 and free of NUL bytes.
// Every backend could store any bytes, but a name must be one that every
// tool can address: the dsync command takes it as an argument and hands
// it to the command it runs in an environment variable, neither of which
// can carry a NUL, and JSON output and log lines cannot carry invalid
// UTF-8 unchanged.
func CheckKey(key string) error {
	switch {
	case key == "":
		return Invalid("key", "empty")
	case len(key) > MaxKeySize:
		return Invalid("key", "%d bytes exceeds the maximum of %d", len(key), MaxKeySize)
	case strings.IndexByte(key, 0) >= 0:
		return Invalid("key", "%q contains a NUL byte", key)
	case !utf8.ValidString(key):
		return Invalid("key", "%q is not valid UTF-8", key)
	}
	return nil
}

// CheckTTL validates a TTL against caps: positive, no finer than the
// backend's resolution and no larger than its maximum.
func CheckTTL(ttl time.Duration, caps Capabilities) error {
	if ttl <= 0 {
		return Invalid("ttl", "%v is not positive", ttl)
	}
	if caps.TTLResolution > 0 && ttl < caps.TTLResolution {
		return Invalid("ttl", "%v is below the %s backend's resolution of %v", ttl, caps.Name, caps.TTLResolution)
	}
	if caps.MaxTTL > 0 && ttl > caps.MaxTTL {
		return Invalid("ttl", "%v is above the %s backend's maximum of %v", ttl, caps.Name, caps.MaxTTL)
	}
	return nil
}

// MarkClosed returns err marked with ErrClosed as well when closed is true
// (a call that failed because its driver was closed meanwhile), keeping the
// client's error visible to errors.Is; otherwise err as it is.
func MarkClosed(closed bool, err error) error {
	if closed && err != nil && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

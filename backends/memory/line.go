package memory

import (
	"time"

	"github.com/dsync-dev/dsync/backends"
)

// line is a lock's waiters in order (backends.Request.Waiter): a refused
// waiter's place lives for its request's TTL after each attempt, and a
// release keeps the lock for the first live waiter for backends.HandOver; a free
// lock goes to a waiter with a place only when no live waiter is ahead
// of it (defers). Guarded by Store.mu.
type line struct {
	places   map[string]time.Time // waiter -> when its place lapses
	reserved string               // the waiter the released lock is kept for
	until    time.Time            // when that reservation lapses
}

func (l *line) empty() bool { return len(l.places) == 0 && l.reserved == "" }

// prune drops lapsed places and a lapsed reservation.
func (l *line) prune(now time.Time) {
	for w, t := range l.places {
		if !now.Before(t) {
			delete(l.places, w)
		}
	}
	if l.reserved != "" && !now.Before(l.until) {
		l.reserved = ""
	}
}

// admits reports whether waiter (or a lone attempt, "") may take the free
// lock now: nobody is reserved for, or waiter is.
func (l *line) admits(waiter string) bool {
	return l.reserved == "" || l.reserved == waiter
}

// defers reports whether waiter, about to take the free lock with no
// reservation standing, must let a live waiter ahead of it have it first,
// and if so keeps the lock for the first of them (as handOver): a waiter
// with a place never passes one ahead of it, even when the heir of the
// last release let its window lapse. A waiter without a place (or a lone
// attempt) takes a free lock as anybody does.
func (l *line) defers(waiter string, now time.Time) bool {
	if _, placed := l.places[waiter]; !placed {
		return false
	}
	for w := range l.places {
		if w < waiter {
			return l.handOver(now)
		}
	}
	return false
}

// join keeps waiter's place until now+ttl.
func (l *line) join(waiter string, now time.Time, ttl time.Duration) {
	if l.places == nil {
		l.places = map[string]time.Time{}
	}
	l.places[waiter] = now.Add(ttl)
}

// served takes waiter, just granted the lock, out of the line.
func (l *line) served(waiter string) {
	delete(l.places, waiter)
	if l.reserved == waiter {
		l.reserved = ""
	}
}

// handOver keeps the just released lock for the first live waiter, if
// any, and reports whether it did.
func (l *line) handOver(now time.Time) bool {
	l.prune(now)
	l.reserved = ""
	for w := range l.places {
		if l.reserved == "" || w < l.reserved {
			l.reserved = w
		}
	}
	if l.reserved == "" {
		return false
	}
	delete(l.places, l.reserved)
	l.until = now.Add(backends.HandOver)
	return true
}

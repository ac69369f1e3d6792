package lease

import (
	"context"
	"sync"

	"github.com/dsync-dev/dsync/backends"
)

// The waiters of one process for one key line up here, first come first
// served, and only the head of the line contends on the backend. Goroutines
// sharing a process therefore never starve one another (a releaser that
// asks again queues behind those already waiting, instead of winning the
// race it is best placed to win), and a crowd of local waiters costs the
// backend one poller, like etcd's waiters that each watch their predecessor.
// Contention between processes is still settled by the backend, with
// jittered retry and release notices.

type queueKey struct {
	driver backends.Driver
	key    string
}

// line is the queue of one key while some waiter is at its head: turns
// holds the channels of the others, in arrival order.
type line struct {
	turns []chan struct{}
}

// headOnly is the line of a key whose head has nobody behind it, shared
// by all such keys (never modified), so that an uncontended Acquire
// allocates no line.
var headOnly = &line{}

var (
	linesMu sync.Mutex
	lines   = map[queueKey]*line{} // protected by linesMu
)

// waitTurn blocks until the caller is at the head of key's line, or ctx
// ends (the error is ctx's, and the caller has left the line). On success
// the caller must call passTurn with the key returned once it is done
// contending.
func waitTurn(ctx context.Context, d backends.Driver, key string) (queueKey, error) {
	k := queueKey{d, key}
	linesMu.Lock()
	l := lines[k]
	if l == nil {
		lines[k] = headOnly
		linesMu.Unlock()
		return k, nil
	}
	if l == headOnly {
		l = &line{}
		lines[k] = l
	}
	turn := make(chan struct{})
	l.turns = append(l.turns, turn)
	linesMu.Unlock()

	select {
	case <-turn:
		return k, nil
	case <-ctx.Done():
		linesMu.Lock()
		for i, t := range l.turns {
			if t == turn {
				l.turns = append(l.turns[:i], l.turns[i+1:]...)
				linesMu.Unlock()
				return queueKey{}, ctx.Err()
			}
		}
		linesMu.Unlock()
		// The turn was handed over as ctx ended: pass it on.
		passTurn(k)
		return queueKey{}, ctx.Err()
	}
}

// passTurn hands the head of the line to the next waiter, or frees it.
func passTurn(k queueKey) {
	linesMu.Lock()
	defer linesMu.Unlock()
	l := lines[k]
	if l != headOnly && len(l.turns) > 0 {
		next := l.turns[0]
		l.turns = l.turns[1:]
		close(next)
		return
	}
	delete(lines, k)
}

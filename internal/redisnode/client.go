package redisnode

import (
	"context"
	"net"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Own returns a copy of o for a client that dsync creates, uses and
// closes itself (a URL's client, a Redlock master's): context deadlines
// bound every read (ContextTimeoutEnabled), a call dials at most once
// (DialerRetries 1: the caller's retry policy decides what comes next), and
// a failed dial is returned to the caller without go-redis logging it (see
// quietDialer). MaxRetries is left to the caller.
func Own(o *goredis.Options) *goredis.Options {
	co := *o
	co.ContextTimeoutEnabled = true
	co.DialerRetries = 1
	co.Dialer = quietDialer(&co)
	return &co
}

// quietDialer dials as o says (o.Dialer, else go-redis's own dialer) and
// hands a failed dial back as a connection whose every read and write
// fails with the dial's error. go-redis prints each dial that fails through
// its process-wide logger (stderr by default), which is the application's
// to set, not a library's (redis.SetLogger); a handshake that fails is not
// logged, and its error is returned to the command's caller as a dial
// error would be. The price: go-redis no longer counts failed dials, so
// each call to a server that is down dials again, where go-redis would
// fail fast after a pool's worth of failures and probe once a second.
func quietDialer(o *goredis.Options) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dial := o.Dialer
	if dial == nil {
		dial = goredis.NewDialer(o)
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := dial(ctx, network, addr)
		if err != nil {
			return failedConn{err: dialError{err}, addr: netAddr{network, addr}}, nil
		}
		return cn, nil
	}
}

// dialError is the error of a failedConn's reads and writes. go-redis
// unwraps the error of a failed handshake once, so that the caller gets
// the dial's own error (a *net.OpError, say); Is and As find it either way.
type dialError struct{ err error }

func (e dialError) Error() string { return e.err.Error() }
func (e dialError) Unwrap() error { return e.err }

// failedConn is a dial that failed, as a connection that fails every read
// and write.
type failedConn struct {
	err  error
	addr net.Addr
}

func (c failedConn) Read([]byte) (int, error)         { return 0, c.err }
func (c failedConn) Write([]byte) (int, error)        { return 0, c.err }
func (c failedConn) Close() error                     { return nil }
func (c failedConn) LocalAddr() net.Addr              { return c.addr }
func (c failedConn) RemoteAddr() net.Addr             { return c.addr }
func (c failedConn) SetDeadline(time.Time) error      { return nil }
func (c failedConn) SetReadDeadline(time.Time) error  { return nil }
func (c failedConn) SetWriteDeadline(time.Time) error { return nil }

// netAddr is the address a failedConn was dialed for.
type netAddr struct{ network, addr string }

func (a netAddr) Network() string { return a.network }
func (a netAddr) String() string  { return a.addr }

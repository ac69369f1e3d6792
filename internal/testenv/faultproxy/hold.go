package faultproxy

import (
	"fmt"
	"net"
)

// portHold keeps a refused proxy's port from other processes, so that a
// client of the proxy never reaches someone else's server: other tests,
// in this process or another, take ports from the kernel all the time,
// and one may be handed a port just closed. It listens and resets every
// connection at once, which a client sees as a server that is down. (A
// socket bound without listening would refuse connections outright, but
// the kernel lets any listener with SO_REUSEADDR bind beside it.)
type portHold struct {
	l    net.Listener
	done chan struct{} // closed when the accept loop has returned
}

// holdPort listens on addr ("127.0.0.1:PORT") and resets whatever
// connects, until release.
func holdPort(addr string) (*portHold, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: hold %s: %w", addr, err)
	}
	h := &portHold{l: l, done: make(chan struct{})}
	go h.reset()
	return h, nil
}

func (h *portHold) reset() {
	defer close(h.done)
	for {
		c, err := h.l.Accept()
		if err != nil {
			return // closed by release
		}
		_ = c.(*net.TCPConn).SetLinger(0) // a reset, not an orderly close
		_ = c.Close()
	}
}

// release frees the port and awaits the accept loop. A nil hold does
// nothing.
func (h *portHold) release() {
	if h == nil {
		return
	}
	_ = h.l.Close()
	<-h.done
}

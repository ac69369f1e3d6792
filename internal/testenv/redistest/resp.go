package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// conn is a bare RESP2 connection for readiness probes and INFO. A client
// library does not fit a probe: go-redis retries failed dials with backoff
// and, after repeated failures, dials again only once a second.
type conn struct {
	nc   net.Conn
	r    *bufio.Reader
	stop func() bool // stops the cancellation of nc by ctx
}

// dial connects to s and authenticates. Until Close, ctx being done makes
// every read and write on the connection fail.
func (s *Server) dial(ctx context.Context) (*conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", s.Addr())
	if err != nil {
		return nil, err
	}
	c := &conn{
		nc:   nc,
		r:    bufio.NewReader(nc),
		stop: context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) }),
	}
	if s.password != "" {
		if _, err := c.do("AUTH", s.password); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

func (c *conn) Close() {
	c.stop()
	_ = c.nc.Close()
}

// do sends one command and returns its reply, which must be a simple or a
// bulk string; an error reply is returned as an error with the server's
// text.
func (c *conn) do(args ...string) (string, error) {
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.nc.Write(b); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "+"):
		return line[1:], nil
	case strings.HasPrefix(line, "-"):
		return "", errors.New(line[1:])
	case strings.HasPrefix(line, "$"):
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			break
		}
		buf := make([]byte, n+2) // and the trailing CRLF
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("redistest: unexpected reply %q", line)
}

// infoField returns the value of name in an INFO reply, or "".
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

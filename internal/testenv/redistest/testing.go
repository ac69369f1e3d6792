package redistest

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// Start starts a server like StartServer, in t.TempDir(), and registers
// its Close with t.Cleanup. On failure, a missing redis-server included, it
// calls t.Fatalf: tests never skip for lack of Redis.
func Start(t testing.TB, opts *Options) *Server {
	t.Helper()
	s, err := start(t.Context(), opts, t.TempDir(), false)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { closeForTest(t, s) })
	return s
}

// StartN starts n servers like Start, in parallel, and blocks until all of
// them answer PING. If any fails, it calls t.Fatalf once the others have
// started and been registered for cleanup.
func StartN(t testing.TB, n int, opts *Options) []*Server {
	t.Helper()
	ctx := t.Context()
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		dir := t.TempDir()
		wg.Go(func() { servers[i], errs[i] = start(ctx, opts, dir, false) })
	}
	wg.Wait()
	for _, s := range servers {
		if s != nil {
			t.Cleanup(func() { closeForTest(t, s) })
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("%v", err)
	}
	return servers
}

func closeForTest(t testing.TB, s *Server) {
	if err := s.Close(); err != nil {
		t.Errorf("%v", err)
	}
}

// NewClient returns a go-redis client for s, with its password, that
// applies context deadlines to network calls (ContextTimeoutEnabled) and is
// closed by t.Cleanup. The client follows s across restarts.
func (s *Server) NewClient(t testing.TB) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{
		Addr:                  s.Addr(),
		Password:              s.password,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// CommandCalls is how many times command cmd ran by stats, the reply of
// INFO commandstats; 0 when it never ran.
func CommandCalls(stats, cmd string) int {
	_, rest, ok := strings.Cut(stats, "cmdstat_"+cmd+":calls=")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
	return n
}

package redlock_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/locker"
	"github.com/dsync-dev/dsync/redlock"
)

// Redlock over three independent masters, built in code. A master does not
// vote until MaxTTL has passed since its server started (the restart
// quarantine: it may have lost holds in a restart); this example's masters
// were started just now, so it uses a short MaxTTL and waits it out, as the
// backend's health report tells.
func ExampleNew() {
	addrs, stop, err := redisServers(3) // three redis-servers for the example
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := context.Background()

	var masters []*goredis.Options
	for _, addr := range addrs {
		masters = append(masters, &goredis.Options{Addr: addr})
	}
	b, err := redlock.New(ctx, masters, &redlock.Options{MaxTTL: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close() // closes the clients New made
	h := waitForVotes(ctx, b)
	fmt.Println("healthy:", h.OK, "nodes:", len(h.Nodes))

	l, err := locker.New(b, "ledger", &locker.Options{TTL: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	first, err := l.Acquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = l.TryAcquire(ctx)
	fmt.Println("a second holder:", err == nil)
	_ = first.Release(ctx)
	second, err := l.Acquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("tokens grow:", second.Token() > first.Token())
	_ = second.Release(ctx)
	// Output:
	// healthy: true nodes: 3
	// a second holder: false
	// tokens grow: true
}

// Redlock from go-redis clients the application already has, one per
// master: the backend takes their settings (address, password, TLS, pool)
// for clients of its own, and leaves the application's open.
func ExampleNewFromClients() {
	addrs, stop, err := redisServers(3) // three redis-servers for the example
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := context.Background()

	var clients []goredis.UniversalClient // the application's
	for _, addr := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		defer c.Close()
		clients = append(clients, c)
	}
	b, err := redlock.NewFromClients(ctx, clients, &redlock.Options{MaxTTL: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	waitForVotes(ctx, b) // fresh masters: see ExampleNew
	l, err := locker.New(b, "report", &locker.Options{TTL: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = dsync.Do(ctx, l, func(ctx context.Context) error {
		fmt.Println("holding the lock on a quorum of masters")
		return nil
	})
	fmt.Println("released:", err)
	fmt.Println("close:", b.Close())
	fmt.Println("the application's clients still work:", clients[0].Ping(ctx).Err() == nil)
	// Output:
	// holding the lock on a quorum of masters
	// released: <nil>
	// close: <nil>
	// the application's clients still work: true
}

// waitForVotes waits until no node of b is in restart quarantine, and
// returns the health report that says so.
func waitForVotes(ctx context.Context, b *dsync.Backend) dsync.Health {
	for {
		h, err := b.Health(ctx)
		quarantined := false
		for _, n := range h.Nodes {
			quarantined = quarantined || n.QuarantinedUntil.After(time.Now())
		}
		if err != nil || !quarantined {
			return h
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The examples start their own redis-server processes (redis-server must be
// on the PATH: apt-get install redis-server); in an application, the
// servers are yours.

// redisServer is a redis-server process started for an example.
type redisServer struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process is reaped
}

// redisServers starts n redis-servers on free loopback ports, without
// persistence; stop kills them.
func redisServers(n int) (addrs []string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, nil, fmt.Errorf("the example starts redis-server: %w", err)
	}
	var servers []redisServer
	stop = func() {
		for _, s := range servers {
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	for len(addrs) < n {
		addr, s, err := startRedis(bin)
		if err != nil {
			stop()
			return nil, nil, err
		}
		addrs, servers = append(addrs, addr), append(servers, s)
	}
	return addrs, stop, nil
}

// startRedis starts a redis-server on a port that was free a moment ago,
// and on another one if that port was taken meanwhile.
func startRedis(bin string) (addr string, s redisServer, err error) {
	for range 5 {
		l, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			return "", s, lerr
		}
		addr = l.Addr().String()
		_ = l.Close()
		_, port, _ := net.SplitHostPort(addr)
		s = redisServer{
			cmd:    exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
			exited: make(chan struct{}),
		}
		if err = s.cmd.Start(); err != nil {
			return "", s, err
		}
		go func() {
			_ = s.cmd.Wait()
			close(s.exited)
		}()
		if err = awaitListening(addr, s.exited); err == nil {
			return addr, s, nil
		}
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	return "", s, err
}

// awaitListening waits until addr accepts connections, or the server
// exits (its port was taken).
func awaitListening(addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited at start (port taken?)", addr)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not listen within 10s", addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

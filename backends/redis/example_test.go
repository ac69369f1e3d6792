package redis_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends/redis"
	"github.com/dsync-dev/dsync/locker"
)

// A go-redis client of your own: the backend uses it as you configured it,
// so give it MaxRetries -1 (one attempt per request: go-redis would resend
// a command whose reply was lost) and ContextTimeoutEnabled (requests
// bounded by their context). The backend does not close it.
func ExampleNew() {
	addrs, stop, err := redisServers(1) // a redis-server for the example
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := context.Background()

	client := goredis.NewClient(&goredis.Options{
		Addr:                  addrs[0],
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	b, err := redis.New(client, &redis.Options{Prefix: "myapp:"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	l, err := locker.New(b, "nightly-report", &locker.Options{TTL: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	lease, err := l.Acquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	held, _ := client.Exists(ctx, "myapp:{nightly-report}").Result() // the key layout is in docs/redis.md
	fmt.Println("lock key on the server:", held == 1, "fencing token:", lease.Token() > 0)
	fmt.Println("release:", lease.Release(ctx))
	held, _ = client.Exists(ctx, "myapp:{nightly-report}").Result()
	fmt.Println("lock key after release:", held == 1)
	// Output:
	// lock key on the server: true fencing token: true
	// release: <nil>
	// lock key after release: false
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

// Leader fleet: worker processes elect one leader, and only the leader runs
// the periodic scheduler; the others wait, and one takes over when the
// leader dies or stops.
//
//	go run ./examples/leader-fleet -demo
//
// starts a redis-server (from $PATH) and three workers, kills the leader
// with SIGKILL (the others take over once its lease expires: the TTL), then
// stops the next leader with SIGTERM (it resigns, and another takes over at
// once). To run the workers yourself, start several, each with an ID of
// its own, on a backend every process can reach:
//
//	DSYNC_URL=redis://127.0.0.1:6379 go run ./examples/leader-fleet -id worker-1
//	DSYNC_URL=etcd://127.0.0.1:2379 go run ./examples/leader-fleet -id worker-2
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/etcd"  // registers etcd://
	_ "github.com/dsync-dev/dsync/backends/redis" // registers redis://
	"github.com/dsync-dev/dsync/leader"
	_ "github.com/dsync-dev/dsync/redlock" // registers redlock://
)

func main() {
	url := flag.String("url", os.Getenv("DSYNC_URL"), "backend URL shared by the workers (default $DSYNC_URL)")
	id := flag.String("id", "", "this worker's candidate ID (default host-pid)")
	ttl := flag.Duration("ttl", 2*time.Second, "leadership TTL: how long the others wait for a dead leader")
	tick := flag.Duration("tick", 300*time.Millisecond, "scheduler period")
	demo := flag.Bool("demo", false, "start a redis-server (unless -url is given) and 3 workers, then kill and stop leaders")
	flag.Parse()
	log.SetFlags(0)
	if *demo {
		if err := runDemo(*url, *ttl, *tick); err != nil {
			log.Fatal("demo: ", err)
		}
		return
	}
	if *url == "" {
		log.Fatal("no backend: pass -url or set DSYNC_URL (redis://, redlock://, etcd://: memory:// is not shared between processes), or run with -demo")
	}
	if *id == "" {
		host, _ := os.Hostname()
		*id = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if err := work(*url, *id, *ttl, *tick); err != nil {
		log.Fatalf("%s: %v", *id, err)
	}
}

// work is one worker: it campaigns, runs the scheduler while it leads, and
// resigns on SIGINT or SIGTERM.
func work(url, id string, ttl, tick time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, err := dsync.Open(ctx, url)
	if err != nil {
		return err
	}
	defer b.Close()
	e, err := leader.New(b, "scheduler", id, &leader.Options{TTL: ttl})
	if err != nil {
		return err
	}
	fmt.Printf("%s: up, campaigning\n", id)
	err = leader.Run(ctx, e, func(ctx context.Context, term uint64) error {
		t := time.NewTicker(tick)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-ctx.Done(): // leadership lost, or we are shutting down
				return nil
			case <-t.C:
				// A real scheduler passes term to what it writes to, so
				// that a stale leader's writes can be rejected.
				fmt.Printf("%s: scheduler tick %d (term %d)\n", id, n, term)
			}
		}
	}, &leader.RunOptions{
		OnStarted: func(term uint64) { fmt.Printf("%s: leading (term %d)\n", id, term) },
		OnStopped: func(term uint64, err error) {
			if err != nil {
				fmt.Printf("%s: stopped leading (term %d): %v\n", id, term, err)
				return
			}
			fmt.Printf("%s: stopped leading (term %d)\n", id, term)
		},
	})
	if errors.Is(err, context.Canceled) {
		fmt.Printf("%s: resigned, exiting\n", id)
		return nil
	}
	return err
}

// runDemo runs three workers as child processes and drives a failover and
// a hand-over, printing what they say.
func runDemo(url string, ttl, tick time.Duration) error {
	if url == "" {
		addr, stopRedis, err := startRedis()
		if err != nil {
			return err
		}
		defer stopRedis()
		url = "redis://" + addr
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	start := time.Now()
	lines := make(chan string)
	workers := map[string]*exec.Cmd{}
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("worker-%d", i)
		cmd := exec.Command(self, "-url", url, "-id", id, "-ttl", ttl.String(), "-tick", tick.String())
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		workers[id] = cmd
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
	}
	fmt.Printf("demo: 3 workers on %s, ttl %v\n", url, ttl)

	// next prints the workers' lines until one says what, and returns the
	// worker that said it.
	next := func(what string) (string, error) {
		timeout := time.After(3*ttl + 10*time.Second)
		for {
			select {
			case line := <-lines:
				fmt.Printf("[%5.2fs] %s\n", time.Since(start).Seconds(), line)
				if who, rest, ok := strings.Cut(line, ": "); ok && strings.HasPrefix(rest, what) {
					return who, nil
				}
			case <-timeout:
				return "", fmt.Errorf("no worker said %q in time", what)
			}
		}
	}
	ticks := func(who string, n int) error {
		for i := 0; i < n; {
			w, err := next("scheduler tick")
			if err != nil {
				return err
			}
			if w == who {
				i++
			}
		}
		return nil
	}

	first, err := next("leading")
	if err != nil {
		return err
	}
	if err := ticks(first, 3); err != nil {
		return err
	}
	fmt.Printf("demo: killing %s with SIGKILL: it cannot resign, so the others wait for its lease to expire\n", first)
	_ = workers[first].Process.Kill()
	killed := time.Now()
	second, err := next("leading")
	if err != nil {
		return err
	}
	fmt.Printf("demo: failover to %s took %v (ttl %v)\n", second, time.Since(killed).Round(time.Millisecond), ttl)
	if err := ticks(second, 3); err != nil {
		return err
	}
	fmt.Printf("demo: stopping %s with SIGTERM: it resigns, and the last worker takes over at once\n", second)
	_ = workers[second].Process.Signal(syscall.SIGTERM)
	stopped := time.Now()
	third, err := next("leading")
	if err != nil {
		return err
	}
	fmt.Printf("demo: hand-over to %s took %v\n", third, time.Since(stopped).Round(time.Millisecond))
	if err := ticks(third, 2); err != nil {
		return err
	}
	_ = workers[third].Process.Signal(syscall.SIGTERM)
	if _, err := next("resigned"); err != nil {
		return err
	}
	fmt.Println("demo: done")
	return nil
}

// startRedis starts a throwaway redis-server on a free loopback port.
func startRedis() (addr string, stop func(), err error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, errors.New("redis-server is not in $PATH: install it (apt-get install redis-server) or pass -url redis://host:6379 (or etcd://, redlock://)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr = l.Addr().String()
	_ = l.Close()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(path, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			return addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("redis-server did not listen on %s within 5s", addr)
		}
	}
}

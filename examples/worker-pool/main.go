// Worker pool: several worker processes share "at most N jobs at once"
// through a dsync semaphore. The program starts the workers as copies of
// itself and prints what they do, with the number of jobs running across
// all of them.
//
//	go run ./examples/worker-pool                        # starts its own redis-server
//	go run ./examples/worker-pool -url redis://127.0.0.1:6379 -workers 5 -size 2
//	go run ./examples/worker-pool -url etcd://127.0.0.1:2379
//
// Kill a worker with SIGKILL while it runs a job: its permit comes back by
// itself when the permit's TTL runs out.
package main

import (
	"bufio"
	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/etcd"  // registers etcd:// and etcds://
	_ "github.com/dsync-dev/dsync/backends/redis" // registers redis:// and rediss://
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	_ "github.com/dsync-dev/dsync/redlock" // registers redlock://
	"github.com/dsync-dev/dsync/semaphore"
)

func main() {
	url := flag.String("url", os.Getenv("DSYNC_URL"), "backend URL (default $DSYNC_URL, else a redis-server started here)")
	workers := flag.Int("workers", 4, "worker processes to start")
	size := flag.Int("size", 2, "jobs allowed to run at once across all workers")
	jobs := flag.Int("jobs", 3, "jobs per worker")
	worker := flag.Int("worker", -1, "run as worker number N (used by the pool itself)")
	flag.Parse()
	log.SetFlags(0)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *worker >= 0 {
		if err := work(ctx, *url, *worker, *size, *jobs); err != nil {
			log.Fatalf("worker %d: %v", *worker, err)
		}
		return
	}
	if *url == "" {
		srv, err := redistest.StartServer(ctx, nil)
		if err != nil {
			log.Fatalf("no -url given and no redis-server to start (%v); pass -url or install redis-server", err)
		}
		defer srv.Close()
		*url = srv.URL()
		fmt.Printf("started redis-server at %s\n", srv.Addr())
	}
	if err := pool(ctx, *url, *workers, *size, *jobs); err != nil {
		log.Fatal(err)
	}
}

// work is one worker process: it runs its jobs one after another, each
// under a permit of the shared semaphore.
func work(ctx context.Context, url string, id, size, jobs int) error {
	b, err := dsync.Open(ctx, url)
	if err != nil {
		return err
	}
	defer b.Close()
	sem, err := semaphore.New(b, "worker-pool-jobs", size, &semaphore.Options{TTL: 5 * time.Second})
	if err != nil {
		return err
	}
	for job := range jobs {
		err := dsync.Do(ctx, sem, func(ctx context.Context) error {
			fmt.Printf("start %d %d %d\n", id, job, time.Now().UnixNano())
			defer func() { fmt.Printf("done %d %d %d\n", id, job, time.Now().UnixNano()) }()
			select { // the job: 300ms of work, stopped if the permit is lost
			case <-time.After(300 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// pool starts the workers and reports their jobs as they start and end.
func pool(ctx context.Context, url string, workers, size, jobs int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	b, err := dsync.Open(ctx, url) // fails early if the backend is out of reach
	if err != nil {
		return err
	}
	fmt.Printf("%d workers, %d jobs each, at most %d at once, on %s\n", workers, jobs, size, b) // the URL, its password redacted
	_ = b.Close()
	type event struct {
		at    int64 // the worker's clock reading (one machine, one clock)
		start bool
	}
	var (
		mu     sync.Mutex // protects events
		events []event
		wg     sync.WaitGroup
		begin  = time.Now()
		failed = make(chan error, workers)
	)
	for i := range workers {
		cmd := exec.CommandContext(ctx, self, "-worker", fmt.Sprint(i), "-url", url,
			"-size", fmt.Sprint(size), "-jobs", fmt.Sprint(jobs))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var what string
				var id, job int
				var at int64
				if _, err := fmt.Sscan(sc.Text(), &what, &id, &job, &at); err != nil {
					continue
				}
				mu.Lock()
				events = append(events, event{at: at, start: what == "start"})
				fmt.Printf("%6.2fs  worker %d %-5s job %d\n", time.Since(begin).Seconds(), id, what, job)
				mu.Unlock()
			}
			if err := cmd.Wait(); err != nil {
				failed <- fmt.Errorf("worker %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		return err
	}
	// Replay the jobs in the order they happened (pipes may deliver lines
	// of different workers out of order) to count how many overlapped.
	slices.SortFunc(events, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	running, most := 0, 0
	for _, e := range events {
		if e.start {
			running++
			most = max(most, running)
		} else {
			running--
		}
	}
	fmt.Printf("all %d jobs done in %.1fs; at most %d ran at once (limit %d)\n", workers*jobs, time.Since(begin).Seconds(), most, size)
	if most > size {
		return fmt.Errorf("the limit was broken: %d jobs ran at once", most)
	}
	return nil
}

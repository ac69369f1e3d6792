package leader_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/leader"
)

// Two candidates: the first leads until it resigns, and the second, waiting
// in Campaign, takes over at once with a greater term.
func Example() {
	ctx := context.Background()
	b, err := memory.New(nil) // in a real fleet: dsync.Open(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	a, _ := leader.New(b, "scheduler", "worker-a", nil)
	w, _ := leader.New(b, "scheduler", "worker-b", nil)

	la, _ := a.Campaign(ctx)
	li, _ := w.Leader(ctx) // what any candidate or observer reads
	fmt.Println("leader:", li.ID, "term", li.Term, "leader's own term", la.Term())

	won := make(chan dsync.Leadership)
	go func() {
		lb, _ := w.Campaign(ctx) // blocks while worker-a leads
		won <- lb
	}()
	_ = la.Resign(ctx)
	lb := <-won
	li, _ = a.Leader(ctx)
	fmt.Println("leader:", li.ID, "term", li.Term, "leader's own term", lb.Term())

	_ = lb.Resign(ctx)
	_, err = a.Leader(ctx)
	fmt.Println(err)
	// Output:
	// leader: worker-a term 1 leader's own term 1
	// leader: worker-b term 2 leader's own term 2
	// dsync: no leader: election "scheduler"
}

// Run leads for as long as its context lasts, calling the function once per
// term with a context that ends when the term does.
func ExampleRun() {
	b, err := memory.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	e, err := leader.New(b, "scheduler", "worker-a", nil)
	if err != nil {
		log.Fatal(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	err = leader.Run(ctx, e, func(ctx context.Context, term uint64) error {
		fmt.Println("leading in term", term)
		stop()       // a real leader works until ctx ends...
		<-ctx.Done() // ...which happens when leadership is lost, too
		return nil
	}, &leader.RunOptions{
		OnStopped: func(term uint64, err error) { fmt.Println("term", term, "ended:", err) },
	})
	fmt.Println("Run:", err)
	// Output:
	// leading in term 1
	// term 1 ended: <nil>
	// Run: context canceled
}

// An observer follows who leads, without a candidate ID of its own: it
// reads the leader every ObserveInterval and at once on a release, and
// sends each leader a read finds ("" for none). Here each term lasts until
// the observer has reported it; a term shorter than the interval may go
// unseen.
func ExampleObserver_Observe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := memory.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	watcher, err := leader.NewObserver(b, "scheduler", &leader.Options{ObserveInterval: 10 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}

	changes := watcher.Observe(ctx)
	fmt.Printf("leader %q\n", (<-changes).ID)
	for _, id := range []string{"worker-a", "worker-b"} {
		e, _ := leader.New(b, "scheduler", id, nil)
		term, _ := e.Campaign(ctx)
		fmt.Printf("leader %q, term %d\n", (<-changes).ID, term.Term())
		_ = term.Resign(ctx)
		fmt.Printf("leader %q\n", (<-changes).ID)
	}
	// Output:
	// leader ""
	// leader "worker-a", term 1
	// leader ""
	// leader "worker-b", term 2
	// leader ""
}

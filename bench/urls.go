package main

import (
	"context"
	"flag"
	"strings"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/locker"
)

// urlScenarios are those bench run -url can measure on a user's servers:
// the semaphore and failover scenarios need servers started here.
var urlScenarios = []string{scUncontended, scThroughput, scContention}

// urlList is a repeatable -url flag.
type urlList []string

func (u *urlList) String() string     { return strings.Join(*u, ",") }
func (u *urlList) Set(v string) error { *u = append(*u, v); return nil }

// explicit reports whether the flag name was given.
func explicit(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// urlTargets opens a backend on each of urls and appends to targets one
// dsync target per URL, in a group of its own named by the redacted URL
// (no peers, no floors: only dsync runs on a user's servers). closeAll
// closes the backends (close the targets first); it is non-nil even on
// failure.
func urlTargets(ctx context.Context, urls []string, targets *[]*target) (closeAll func(), err error) {
	var opened []*dsync.Backend
	closeAll = func() {
		for _, b := range opened {
			_ = b.Close()
		}
	}
	for _, u := range urls {
		b, err := dsync.Open(ctx, u)
		if err != nil {
			return closeAll, err
		}
		opened = append(opened, b)
		if err := waitQuarantine(ctx, b); err != nil {
			return closeAll, err
		}
		t := dsyncTarget(b.String(), "", b, "", &locker.Options{TTL: lockTTL})
		t.cycles, t.contended = true, true
		*targets = append(*targets, t)
	}
	return closeAll, nil
}

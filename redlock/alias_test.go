package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/testenv/faultproxy"
	"github.com/dsync-dev/dsync/locker"
	"github.com/dsync-dev/dsync/redlock"
)

// syncBuffer is a log sink that the driver's goroutines write while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestAliasNeverVotes: a fourth address that reaches the first of three
// masters through a proxy, refusing connections while the driver opens
// (so the duplicate check of New cannot see it), is found out when it
// first answers and never votes: with the third master down, the first
// master and its alias do not make up, with the second, the quorum of 3
// that a refresh and a holder read need. Counted twice, they would.
func TestAliasNeverVotes(t *testing.T) {
	servers := agedServers(t, 3, nil)
	addrs := addrsOf(servers)
	alias := faultproxy.Start(t, addrs[0])
	if err := alias.Refuse(); err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	ctx := context.Background()
	opts := []*goredis.Options{{Addr: addrs[0]}, {Addr: addrs[1]}, {Addr: addrs[2]}, {Addr: alias.Addr()}}
	d, err := redlock.NewDriver(ctx, opts, &redlock.Options{
		MaxTTL: faultMaxTTL, NodeTimeout: faultNodeTimeout,
		BackendOptions: dsync.BackendOptions{Telemetry: dsync.Telemetry{Logger: slog.New(slog.NewTextHandler(&log, nil))}},
	})
	if err != nil {
		t.Fatalf("New with the alias refusing connections: %v", err)
	}
	b, err := dsync.NewBackend(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if err := alias.Heal(); err != nil {
		t.Fatal(err)
	}

	// The alias answers from now on: its first round tells who it is.
	lease, _ := acquireWithin(t, newLocker(t, b, "alias", &locker.Options{TTL: faultMaxTTL}), 5*time.Second)
	defer lease.Release(context.Background())
	if err := servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	wantAlias := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s succeeded with 2 of 3 masters up and the alias of one: it counted the alias", what)
		}
		if !errors.Is(err, redlock.ErrAlias) {
			t.Errorf("%s: %v, want it to match ErrAlias", what, err)
		}
		found := false
		for _, ne := range nodeErrors(err) {
			if ne.Index == 3 && errors.Is(ne, redlock.ErrAlias) && strings.Contains(ne.Error(), alias.Addr()) && strings.Contains(ne.Error(), addrs[0]) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: %v, want node 3's error to name the alias %s and its master %s", what, err, alias.Addr(), addrs[0])
		}
	}
	ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	wantAlias("Extend", lease.Extend(ectx))
	_, err = d.Holder(ectx, "alias")
	wantAlias("Holder", err)
	if !errors.Is(err, redlock.ErrNoQuorum) {
		t.Errorf("Holder: %v, want ErrNoQuorum", err)
	}
	if got := log.String(); !strings.Contains(got, "left out of every quorum") || !strings.Contains(got, alias.Addr()) || !strings.Contains(got, addrs[0]) {
		t.Errorf("log %q: want a warning naming the alias %s and its master %s", got, alias.Addr(), addrs[0])
	}
}

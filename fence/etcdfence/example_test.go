package etcdfence_test

import (
	"context"
	"errors"
	"log"
	"os"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/fence"
	"github.com/dsync-dev/dsync/fence/etcdfence"
	"github.com/dsync-dev/dsync/locker"
)

// A write to etcd guarded by a lease's token, with a compare of the
// caller's: the report is written only if the token is not stale and the
// report is still at the revision this holder read. The lock may be on
// any backend; its tokens need not come from etcd. Not run here: it needs
// an etcd (the guard's tests run it on an embedded one).
func Example() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	guard, err := etcdfence.New(cli, nil)
	if err != nil {
		log.Fatal(err)
	}

	lease := acquire(ctx, "nightly-report")
	defer lease.Release(ctx)
	var readRev int64 // the report's ModRevision when this holder read it
	resp, err := guard.Txn(ctx, "nightly-report", lease.Token()).
		If(clientv3.Compare(clientv3.ModRevision("reports/nightly"), "=", readRev)).
		Then(clientv3.OpPut("reports/nightly", "v2")).
		Commit()
	switch {
	case errors.Is(err, fence.ErrStale):
		// A newer holder has written: this lease is lost. Nothing ran.
	case err != nil:
		log.Fatal(err)
	case !resp.Succeeded:
		// The report changed since it was read; the fence is unchanged.
	}
}

// acquire takes the lock name on the backend of $DSYNC_URL (say
// redis://localhost:6379), as an application would; the backend stays
// open for the life of the program.
func acquire(ctx context.Context, name string) dsync.Lease {
	b, err := dsync.Open(ctx, os.Getenv("DSYNC_URL"))
	if err != nil {
		log.Fatal(err)
	}
	l, err := locker.New(b, name, nil)
	if err != nil {
		log.Fatal(err)
	}
	lease, err := l.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	return lease
}

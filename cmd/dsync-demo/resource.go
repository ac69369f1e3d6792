package main

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync/fence"
	"github.com/dsync-dev/dsync/fence/etcdfence"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

// resource is what the stale write's holders write to, as they would to a
// database: a store of its own, apart from the servers under test, that
// checks every write's fencing token through a guard of package fence.
type resource struct {
	what  string // for the story
	write func(ctx context.Context, name string, token uint64, v string) error
	close func() error
}

// startResource starts the resource: a redis-server written through
// fence.Redis when redis-server is installed, else a one-member etcd in
// this process written through etcdfence.
func startResource(ctx context.Context) (*resource, error) {
	if _, err := lookupRedis(); err == nil {
		srv, err := redistest.StartServer(ctx, nil)
		if err != nil {
			return nil, err
		}
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		g, err := fence.NewRedis(c, nil)
		if err != nil {
			return nil, errors.Join(err, c.Close(), srv.Close())
		}
		return &resource{
			what: fmt.Sprintf("a redis-server at %s, written through fence's Redis guard", srv.Addr()),
			write: func(ctx context.Context, name string, token uint64, v string) error {
				return g.Set(ctx, name, token, "{"+name+"}:report", v, 0)
			},
			close: func() error { return errors.Join(c.Close(), srv.Close()) },
		}, nil
	}
	cl, err := etcdtest.StartServer(ctx, nil)
	if err != nil {
		return nil, err
	}
	c, err := cl.NewClient()
	if err != nil {
		return nil, errors.Join(err, cl.Close())
	}
	g, err := etcdfence.New(c, nil)
	if err != nil {
		return nil, errors.Join(err, c.Close(), cl.Close())
	}
	return &resource{
		what: fmt.Sprintf("an etcd at %s, written through etcdfence", cl.Endpoint(0)),
		write: func(ctx context.Context, name string, token uint64, v string) error {
			_, err := g.Txn(ctx, name, token).Then(clientv3.OpPut("report/"+name, v)).Commit()
			return err
		},
		close: func() error { return errors.Join(c.Close(), cl.Close()) },
	}, nil
}

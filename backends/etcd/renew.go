package etcd

import (
	"context"
	"errors"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/dsync-dev/dsync/backends"
)

// renewer renews leases, for speed only, one request at a time over a
// LeaseKeepAlive stream that the driver keeps open, where clientv3's
// KeepAliveOnce opens a stream per renewal (BenchmarkKeepAliveStream; the
// figures are in docs/performance.md). The server answers a stream's
// requests in order, so answers go to the renewals in the order they were
// sent. A stream that fails fails the renewals waiting on it and is
// dropped; the next renewal opens another.
type renewer struct {
	client *clientv3.Client

	open chan struct{} // a lock that honours contexts: held while opening a stream

	mu     sync.Mutex // protects the fields below
	cur    *kaStream  // nil when no stream is open
	closed bool
	wg     sync.WaitGroup // the streams' receive goroutines
}

// kaStream is one LeaseKeepAlive stream and its receive goroutine.
type kaStream struct {
	stream pb.Lease_LeaseKeepAliveClient
	cancel context.CancelFunc

	mu      sync.Mutex      // protects the fields below, and serializes Send
	waiters []chan kaAnswer // in the order their requests were sent
	err     error           // why the stream failed; nil while it works
}

type kaAnswer struct {
	resp *pb.LeaseKeepAliveResponse
	err  error
}

func (r *renewer) init(client *clientv3.Client) {
	r.client = client
	r.open = make(chan struct{}, 1)
}

// send sends a renewal of lease id and returns a function that waits for
// its answer within a context, so that the caller can do other work
// meanwhile.
func (r *renewer) send(ctx context.Context, id clientv3.LeaseID) func(context.Context) (*pb.LeaseKeepAliveResponse, error) {
	ch := make(chan kaAnswer, 1) // an answer after the wait ended is dropped
	wait := func(ctx context.Context) (*pb.LeaseKeepAliveResponse, error) {
		select {
		case a := <-ch:
			if a.err != nil {
				return nil, a.err
			}
			if a.resp.TTL <= 0 {
				return nil, rpctypes.ErrLeaseNotFound
			}
			return a.resp, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for {
		s, err := r.stream(ctx)
		if err != nil {
			ch <- kaAnswer{err: err}
			return wait
		}
		s.mu.Lock()
		if s.err != nil {
			// It failed before this request was sent: try a new one.
			s.mu.Unlock()
			r.drop(s)
			continue
		}
		s.waiters = append(s.waiters, ch)
		if err = s.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
			s.failLocked(err)
		}
		s.mu.Unlock()
		if err != nil {
			r.drop(s)
		}
		return wait
	}
}

// stream returns the open stream, opening one if there is none, within
// ctx.
func (r *renewer) stream(ctx context.Context) (*kaStream, error) {
	select {
	case r.open <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-r.open }()

	r.mu.Lock()
	s, closed := r.cur, r.closed
	r.mu.Unlock()
	if closed {
		return nil, backends.ErrClosed
	}
	if s != nil {
		return s, nil
	}

	sctx, cancel := context.WithCancel(context.Background())
	// The stream outlives ctx, but opening it must not: a cluster out of
	// reach would keep it waiting.
	stop := context.AfterFunc(ctx, cancel)
	st, err := pb.NewLeaseClient(r.client.ActiveConnection()).LeaseKeepAlive(sctx, grpc.WaitForReady(true))
	if !stop() {
		err = errors.Join(err, ctx.Err())
	}
	if err != nil {
		cancel()
		return nil, err
	}
	s = &kaStream{stream: st, cancel: cancel}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		cancel()
		return nil, backends.ErrClosed
	}
	r.cur = s
	r.wg.Add(1)
	go r.receive(s)
	return s, nil
}

// receive hands each answer to the oldest waiting renewal, until the stream
// fails or is cancelled.
func (r *renewer) receive(s *kaStream) {
	defer r.wg.Done()
	for {
		resp, err := s.stream.Recv()
		s.mu.Lock()
		if err != nil {
			s.failLocked(err)
			s.mu.Unlock()
			r.drop(s)
			return
		}
		if len(s.waiters) == 0 {
			s.mu.Unlock() // an answer to nothing we sent; cannot happen
			continue
		}
		ch := s.waiters[0]
		s.waiters = s.waiters[1:]
		s.mu.Unlock()
		ch <- kaAnswer{resp: resp}
	}
}

// failLocked records why s failed and fails its waiters. s.mu must be held.
func (s *kaStream) failLocked(err error) {
	if s.err != nil {
		return
	}
	s.err = err
	for _, ch := range s.waiters {
		ch <- kaAnswer{err: err}
	}
	s.waiters = nil
	s.cancel()
}

// drop forgets s if it is the open stream.
func (r *renewer) drop(s *kaStream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == s {
		r.cur = nil
	}
}

// close cancels the open stream and awaits its receive goroutine.
func (r *renewer) close() {
	r.mu.Lock()
	r.closed = true
	if r.cur != nil {
		r.cur.cancel()
		r.cur = nil
	}
	r.mu.Unlock()
	r.wg.Wait()
}

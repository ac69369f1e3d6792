package etcd

import (
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dsync-dev/dsync/backends"
)

// refusal marks an error with which etcd (or gRPC on its way) refused a
// request for good, so that no retry can cure it, as an *InvalidError,
// which matches backends.ErrInvalid; the client's error stays in the chain
// for errors.Is and errors.As. Refusals are a request too large for the
// server or the connection, permission denied, and an argument etcd calls
// invalid. Other errors (overload, a lost leader, a rate limit, which gRPC
// also reports as ResourceExhausted) are returned as they are.
func refusal(err error) error {
	if err == nil || errors.Is(err, backends.ErrInvalid) {
		return err
	}
	var why string
	switch code, msg := errorCode(err); {
	case errors.Is(err, rpctypes.ErrRequestTooLarge),
		code == codes.ResourceExhausted && strings.Contains(msg, "larger than max"):
		why = "etcd refused the request as too large"
	case code == codes.PermissionDenied:
		why = "etcd denied permission (does the user's role cover the prefix?)"
	case code == codes.InvalidArgument:
		why = "etcd refused the request as invalid"
	default:
		return err
	}
	return fmt.Errorf("%w: %w", backends.Invalid("request", "%s", why), err)
}

// errorCode is the gRPC code and message of err, as gRPC or clientv3 (which
// turns the server's errors into rpctypes.EtcdError values) reports it.
func errorCode(err error) (codes.Code, string) {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code(), ee.Error()
	}
	if s, ok := status.FromError(err); ok {
		return s.Code(), s.Message()
	}
	return codes.Unknown, err.Error()
}

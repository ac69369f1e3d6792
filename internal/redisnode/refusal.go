package redisnode

import (
	"errors"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
)

// refusals are the error codes with which a Redis server refuses a request
// for good: no permission (ACL), no or wrong authentication, and a key of
// dsync's that holds another type (written by something else).
var refusals = []string{"NOPERM", "NOAUTH", "WRONGPASS", "WRONGTYPE"}

// Refusal marks an error with which the server refused a request for good,
// so that no retry can cure it, as an *InvalidError, which matches
// backends.ErrInvalid; the server's error stays in the chain. Other errors
// (timeouts, a lost connection, LOADING, READONLY during a failover, OOM)
// are returned as they are.
func Refusal(err error) error {
	var rerr goredis.Error
	if err == nil || !errors.As(err, &rerr) || errors.Is(err, backends.ErrInvalid) {
		return err
	}
	msg := rerr.Error()
	for _, code := range refusals {
		if strings.HasPrefix(msg, code+" ") || strings.Contains(msg, ": "+code+" ") {
			return fmt.Errorf("%w: %w", backends.Invalid("request", "the Redis server refused it (%s)", code), err)
		}
	}
	return err
}

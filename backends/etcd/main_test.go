package etcd_test

import (
	"testing"

	"github.com/dsync-dev/dsync/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

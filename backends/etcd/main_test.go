package etcd_test

import (
	"testing"

	"github.com/dsync-dev/dsync/internal/etcdtest"
)

func TestMain(m *testing.M) { etcdtest.VerifyTestMain(m) }

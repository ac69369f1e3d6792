package etcd_test

import (
	"testing"

	"github.com/dsync-dev/dsync/backends/backendtest"
)

func TestMain(m *testing.M) { backendtest.Main(m) }

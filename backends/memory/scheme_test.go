package memory_test

import (
	"testing"

	"github.com/dsync-dev/dsync/backends/backendtest"
)

func TestSchemeRegistered(t *testing.T) { backendtest.CheckScheme(t, "memory") }

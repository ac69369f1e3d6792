package backendtest

import "testing"

// runSemaphores runs the semaphore checks.
func (s *suite) runSemaphores(t *testing.T) {}

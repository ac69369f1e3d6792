package backendtest

import "testing"

// runElections runs the leader-election checks.
func (s *suite) runElections(t *testing.T) {}

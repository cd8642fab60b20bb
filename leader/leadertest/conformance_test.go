package leadertest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
)

// TestStore_Fake runs the store conformance suite against the fake; the
// suite's own goroutines must all have ended with it.
func TestStore_Fake(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	leadertest.TestStore(t, func(*testing.T) leader.Store { return leadertest.New() })
}

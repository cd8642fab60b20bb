package liveness

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no timer callback outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

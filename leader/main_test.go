package leader_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv("SOLO_LEADER_CHILD") != "" {
		// Re-executed as a child candidate by a crash test.
		os.Exit(runChild())
	}
	goleak.VerifyTestMain(m)
}

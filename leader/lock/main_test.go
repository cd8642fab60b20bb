package lock_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv("SOLO_LOCK_CHILD") != "" {
		// Re-executed as a child process by TestMutex_ProcessesWitness.
		os.Exit(runChild())
	}
	goleak.VerifyTestMain(m)
}

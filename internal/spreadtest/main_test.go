//go:build linux

package spreadtest_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/solo-run/solo/internal/spreadtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(spreadtest.InstanceEnv) != "" {
		// Re-executed by a rig as an instance.
		os.Exit(spreadtest.InstanceMain())
	}
	goleak.VerifyTestMain(m)
}

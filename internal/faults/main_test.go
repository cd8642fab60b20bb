//go:build linux

package faults_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/solo-run/solo/internal/faults"
)

// report collects every row's figures; TestMain writes it as Markdown in the
// long profile, or wherever SOLO_FAULTS_REPORT says.
var (
	report  = faults.NewReport()
	profile = faults.CurrentProfile()
)

func TestMain(m *testing.M) {
	if os.Getenv(faults.CandidateEnv) != "" {
		// Re-executed by a rig as a candidate process.
		os.Exit(faults.CandidateMain())
	}
	goleak.VerifyTestMain(reportingM{m})
}

// reportingM writes the report after the tests ran, before goleak looks.
type reportingM struct{ m *testing.M }

func (r reportingM) Run() int {
	code := r.m.Run()
	path := os.Getenv("SOLO_FAULTS_REPORT")
	if path == "" && profile.Name == "long" {
		path = "docs/faults.md"
	}
	if path != "" {
		written, err := report.WriteFile(path, profile, code != 0)
		if err != nil {
			fmt.Fprintf(os.Stderr, "faults: write report: %v\n", err)
			return max(code, 1)
		}
		fmt.Printf("faults: report written to %s (seed %d)\n", written, faults.Seed())
	}
	return code
}

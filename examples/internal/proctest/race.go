//go:build race

package proctest

// raceEnabled is true when the tests run with -race; the programs they build
// are then built with -race too, so a data race in solo during a real
// failover fails the run.
const raceEnabled = true

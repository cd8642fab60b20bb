//go:build !race

package sim_test

// raceScale: see race_on_test.go.
const raceScale = 1

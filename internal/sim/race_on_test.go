//go:build race

package sim_test

// raceScale divides the CI profiles' schedule counts under the race
// detector: the shipped scripts run on gopher-lua, which the detector
// slows about fourteenfold (acquire.lua: 19 µs → 268 µs per run), and a
// quarter of the schedules keeps `go test -race ./internal/sim` within
// the time the profiles took before they ran the scripts. Data races show
// in any schedule; the full counts run without -race.
const raceScale = 4

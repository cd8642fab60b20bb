//go:build race

package sim_test

// raceOn: the CI profiles run fewer schedules under the race detector.
// The shipped scripts run on gopher-lua, which the detector slows about
// fourteenfold (acquire.lua: 19 µs → 268 µs per run): an election
// schedule costs about 2.4 times what it did when the server was Go, a
// lock schedule about 1.5 times. 2,000 election and 600 lock schedules
// keep `go test -race ./internal/sim` within the time the profiles took
// before; data races show in any schedule, and the full counts, which
// catch a broken script, run without -race.
const raceOn = true

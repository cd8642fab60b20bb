// Package proctest runs the examples as real processes in their tests: it
// builds a program once per test, starts it with its output captured line by
// line, waits for lines, signals it and collects its exit status.
//
// It is test support for the examples, not part of them: the example programs
// use only solo's public API. The package is Unix-only: tests signal the
// processes (SIGINT, SIGTERM, SIGKILL, SIGSTOP/SIGCONT).
package proctest

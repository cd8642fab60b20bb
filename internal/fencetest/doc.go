// Package fencetest holds the tests of leader/fence (and of worker with a
// real fence) that need database drivers: SQLite (modernc.org/sqlite) and
// PostgreSQL (pgx, through internal/pgtest). They live here, not beside the
// packages they test, so that a module importing leader/fence or worker
// never loads those drivers: `go mod tidy` in a user's module follows the
// test imports of the packages it imports, and would download them (about
// 43 MB of sqlite and libc) for tests the user never runs.
package fencetest

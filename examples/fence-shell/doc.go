// Package fenceshell is the tested recipe behind docs/cli.md's "Fence
// writes from any language": write.sh writes to PostgreSQL with psql under
// `solo run --fence-dsn`, and a stale leader's write is refused. See
// README.md beside this file.
package fenceshell

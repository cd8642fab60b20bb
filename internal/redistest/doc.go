// Package redistest starts real redis-server processes on loopback for tests:
// a single server, a Cluster of masters, or a primary with replicas watched by
// Sentinels.
//
// Every server runs in its own temporary directory without persistence, in its
// own process group, and dies with the test binary (Pdeathsig on Linux). Each
// helper registers its cleanup with the test, so callers never stop servers
// themselves. When redis-server is not on PATH a test is skipped, unless
// Required reports true, in which case it fails.
//
// The package is Unix-only: it controls servers with process-group signals.
package redistest

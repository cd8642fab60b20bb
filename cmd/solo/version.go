package main

import (
	"cmp"
	"fmt"
	"io"

	"github.com/solo-run/solo/internal/version"
)

// soloVersion returns this build's solo version (version.Get): v1.2.3 when
// built by `go install github.com/solo-run/solo/cmd/solo@v1.2.3`, else the
// -ldflags value, else "(devel)".
func soloVersion() string { return version.Get().Version }

// soloProtocol returns the election protocol this build speaks.
func soloProtocol() int { return version.Get().Protocol }

// versionCommand prints solo version's lines: the version with the
// protocols (the line scripts read), then the commit and the Go release.
func versionCommand(stdout io.Writer) error {
	v := version.Get()
	_, err := fmt.Fprintf(stdout, "solo %s (protocol %d, shares an election with %d and up)\ncommit: %s\ngo: %s\n",
		v.Version, v.Protocol, v.MinPeerProtocol, cmp.Or(v.Commit, "unknown"), v.GoVersion)
	return err
}

// Package version says which solo a binary holds: its module version, its
// commit, the Go release that built it and the election protocol it
// speaks. `solo version`, solo run's start-up log line and the
// solo_build_info metric (worker/workerprom, so both solo run and a
// service embedding solo export it) read it here, so the three agree.
//
// It is internal: a build detail, not API a library user should depend
// on. One package, not a function of leader, because the lookup must
// serve both the solo command (solo is the main module) and a service
// that imports solo (solo is a dependency), and no election package
// should own reading build information.
package version

import (
	"runtime"
	"runtime/debug"

	"github.com/solo-run/solo/leader"
)

// Module is solo's module path.
const Module = "github.com/solo-run/solo"

// Devel is the version of a build that records none: from a work tree
// without -ldflags.
const Devel = "(devel)"

// version and commit may be set by the linker, for builds from a checkout
// that record no module version (go build records "(devel)"):
//
//	go build -ldflags "-X github.com/solo-run/solo/internal/version.version=v0.2.0 \
//	    -X github.com/solo-run/solo/internal/version.commit=$(git rev-parse HEAD)" ./cmd/solo
//
// A module version Go recorded (go install …@v0.2.0) wins over them.
var version, commit string

// Info describes this build.
type Info struct {
	// Version is solo's module version: v1.2.3 for a binary built by `go
	// install github.com/solo-run/solo/cmd/solo@v1.2.3` or a service that
	// requires solo v1.2.3, a pseudo-version for a commit, else the
	// -ldflags value, else Devel.
	Version string
	// Commit is the commit built (vcs.revision, recorded by go build in a
	// git work tree, or -ldflags), with "+dirty" when the tree had
	// changes; "" when unknown (go install records none).
	Commit string
	// GoVersion is the Go release that built the binary (go1.26.1).
	GoVersion string
	// Protocol and MinPeerProtocol are leader.SpokenProtocol's.
	Protocol, MinPeerProtocol int
}

// Get returns this build's Info.
func Get() Info {
	p, m := leader.SpokenProtocol()
	info := Info{Version: Devel, Commit: commit, GoVersion: runtime.Version(), Protocol: p, MinPeerProtocol: m}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if version != "" {
			info.Version = version
		}
		return info
	}
	info.GoVersion = bi.GoVersion
	if v := moduleVersion(bi); v != "" && v != Devel {
		info.Version = v
	} else if version != "" {
		info.Version = version
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" && bi.Main.Path == Module {
		info.Commit = rev
		if dirty {
			info.Commit += "+dirty"
		}
	}
	return info
}

// moduleVersion returns solo's version in bi: the main module's when solo
// is the main module, else the dependency's (its replacement's, if
// replaced).
func moduleVersion(bi *debug.BuildInfo) string {
	if bi.Main.Path == Module {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == Module {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}

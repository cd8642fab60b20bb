package version

import (
	"runtime/debug"
	"testing"
)

// solo's version is the main module's for the solo command, and the
// dependency's (its replacement's, when replaced) for a service that
// imports solo.
func TestModuleVersion(t *testing.T) {
	for _, tt := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"solo command", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "v0.2.0"}}, "v0.2.0"},
		{"work tree", debug.BuildInfo{Main: debug.Module{Path: Module, Version: Devel}}, Devel},
		{"a service", debug.BuildInfo{Main: debug.Module{Path: "example.com/svc", Version: "v9.9.9"},
			Deps: []*debug.Module{{Path: "go.uber.org/fx", Version: "v1.0.0"}, {Path: Module, Version: "v0.1.0"}}}, "v0.1.0"},
		{"a replaced solo", debug.BuildInfo{Main: debug.Module{Path: "example.com/svc"},
			Deps: []*debug.Module{{Path: Module, Version: "v0.1.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v0.1.1-fork"}}}}, "v0.1.1-fork"},
		{"no solo", debug.BuildInfo{Main: debug.Module{Path: "example.com/svc"}}, ""},
	} {
		if got := moduleVersion(&tt.bi); got != tt.want {
			t.Errorf("%s: moduleVersion = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// Get always reports the protocol and a Go release.
func TestGet(t *testing.T) {
	v := Get()
	if v.Version == "" || v.GoVersion == "" || v.Protocol < 1 || v.MinPeerProtocol < 1 {
		t.Fatalf("Get() = %+v", v)
	}
}

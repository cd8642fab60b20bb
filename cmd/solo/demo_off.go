//go:build solo_nodemo

package main

import "io"

// demoCommand without the demo: a production build (-tags solo_nodemo)
// leaves out the demo and the in-process Redis it embeds, about 3 MiB of
// a 32 MiB binary (SQLite stays: the fence takes sqlite: DSNs).
func demoCommand(_ []string, _, _ io.Writer, _ []string) error {
	v := soloVersion()
	if v == "(devel)" {
		v = "latest"
	}
	return usageErr("this build of solo has no demo (built with -tags solo_nodemo); run: go run github.com/solo-run/solo/cmd/solo@%s demo", v)
}

//go:build tools

// Package tools pins the versions of the tools .ci/run uses:
// cd tools && go run honnef.co/go/tools/cmd/staticcheck ...
package tools

import _ "honnef.co/go/tools/cmd/staticcheck"

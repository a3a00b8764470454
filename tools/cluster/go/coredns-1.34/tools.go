//go:build tools

// The programs tools/cluster/build.sh builds from this module: importing them keeps go.mod and
// go.sum complete for them (go mod tidy).
package tools

import (
	_ "github.com/coredns/coredns"
)

//go:build tools

// The programs tools/cluster/build.sh builds from this module: importing them keeps go.mod and
// go.sum complete for them (go mod tidy). The ginkgo CLI runs e2e.test's specs on several
// processes at once (ginkgo -p); it is the release of the ginkgo library e2e.test is built with.
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
)

//go:build tools

// The programs tools/cluster/build.sh builds from this module: importing them keeps go.mod and
// go.sum complete for them (go mod tidy).
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "go.etcd.io/etcd/etcdctl/v3"
)

module csi-hostpath.local/ginkgo-build

go 1.24.0

require github.com/onsi/ginkgo/v2 v2.21.0

require (
	github.com/go-task/slim-sprig/v3 v3.0.0 // indirect
	github.com/google/pprof v0.0.0-20241029153458-d1b30febd7db // indirect
	golang.org/x/tools v0.26.0 // indirect
)

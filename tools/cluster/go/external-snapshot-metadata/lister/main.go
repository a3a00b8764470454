// snapshot-metadata-lister: a backup client of changed-block tracking, for experiment m
// (tests/k8s/experiments/exp_cbt.py). It lists a VolumeSnapshot's allocated blocks, or the blocks
// changed since an earlier snapshot, through the external-snapshot-metadata sidecar's TLS API.
//
// Why the project has its own: from v1.0.0 on, external-snapshot-metadata's example client lives
// in a nested module (tools/snapshot-metadata-lister) that has no release of its own and that the
// Go module proxy does not serve; the library it wraps, pkg/iterator of the main module, is served
// at the pinned release. This program is that library behind the same command-line flags, so the
// client speaks the pinned release's API (the SnapshotMetadataService version, the token and
// gRPC exchange) exactly as upstream's client does.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/iterator"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	os.Exit(run())
}

func run() int {
	var args iterator.Args
	var kubeconfig, format string
	var maxResults int
	// Each flag keeps upstream's long and short names, so its documented invocations work here.
	both := func(p *string, long, short, usage string) {
		flag.StringVar(p, long, "", usage)
		flag.StringVar(p, short, "", "shorthand for -"+long)
	}
	both(&args.Namespace, "namespace", "n", "namespace of the VolumeSnapshots")
	both(&args.SnapshotName, "snapshot", "s", "the VolumeSnapshot whose blocks are listed")
	both(&args.PrevSnapshotName, "previous-snapshot", "p",
		"an earlier VolumeSnapshot: list the blocks changed since it")
	both(&args.PrevSnapshotID, "previous-snapshot-id", "P",
		"the CSI handle of an earlier snapshot (wins over -p)")
	flag.StringVar(&format, "output-format", "table", `"table" or "json"`)
	flag.StringVar(&format, "o", "table", "shorthand for -output-format")
	flag.StringVar(&kubeconfig, "kubeconfig", "",
		"kubeconfig file; empty: the pod's own ServiceAccount (in-cluster)")
	flag.StringVar(&args.SAName, "service-account", "",
		"ServiceAccount whose token is sent; empty: the pod's own")
	flag.StringVar(&args.SANamespace, "service-account-namespace", "",
		"namespace of -service-account")
	flag.Int64Var(&args.TokenExpirySecs, "token-expiry", iterator.DefaultTokenExpirySeconds,
		"lifetime of the token, in seconds")
	flag.Int64Var(&args.StartingOffset, "starting-offset", 0, "the byte offset to start at")
	flag.IntVar(&maxResults, "max-results", 0, "block ranges per record; 0: the driver's choice")
	flag.Parse()
	args.MaxResults = int32(maxResults)

	switch format {
	case "table":
		args.Emitter = &iterator.TableEmitter{Writer: os.Stdout}
	case "json":
		args.Emitter = &iterator.JSONEmitter{Writer: os.Stdout}
	default:
		return fail(fmt.Errorf("-o %q: want table or json", format))
	}
	if args.Namespace == "" || args.SnapshotName == "" {
		flag.Usage()
		return 2
	}

	var config *rest.Config
	var err error
	if kubeconfig == "" {
		config, err = rest.InClusterConfig()
	} else {
		config, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return fail(err)
	}
	if args.Clients, err = iterator.BuildClients(config); err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := iterator.GetSnapshotMetadata(ctx, args); err != nil {
		return fail(err)
	}
	if format == "json" {
		// The JSON emitter ends its list without a newline; a log line reads better with one.
		fmt.Println()
	}
	return 0
}

func fail(err error) int {
	fmt.Fprintf(os.Stderr, "snapshot-metadata-lister: %v\n", err)
	return 1
}

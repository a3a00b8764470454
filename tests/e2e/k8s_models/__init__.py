"""Models of the real Kubernetes components that drive a CSI driver, each written from its
upstream source and naming the file and function it follows:

- `attacher.ExternalAttacher`: kubernetes-csi/external-attacher, pkg/controller/csi_handler.go;
- `adc.AttachDetachController`: kubernetes/kubernetes, pkg/controller/volume/attachdetach;
- `kubelet.VolumeManager`: kubernetes/kubernetes, pkg/kubelet/volumemanager/reconciler;
- `provisioner.ExternalProvisioner`: kubernetes-csi/external-provisioner, pkg/controller;
- `nodes.NodeLifecycle`: the node lifecycle and pod GC controllers, as far as volumes see them.

Time is simulated (`clock.SimClock`): a scenario advances it, and every model runs its loop at
each tick, so the attach-detach controller's 6-minute wait takes a fraction of a second. The
driver under the models is real: a controller process and node plugins in their own mount
namespaces. Scenarios act only through the models and the API objects (`objects.Api`), the way
a user acts through kubectl; the models alone send the CSI calls. They need no cluster, and run
with the rest of tests/e2e; what needs a cluster is in tests/k8s/."""

"""Typed domain errors. The api layer maps each class to one gRPC status code (api/status.py)."""

from __future__ import annotations


class DriverError(Exception):
    """Base class: a failure the driver reports on purpose, with a message a human can act on."""


class InvalidRequest(DriverError):
    """A required field is missing or a value is malformed."""


class Unsupported(DriverError):
    """The request asks for something this driver does not do (e.g. MNMW on a filesystem)."""


class VolumeNotFound(DriverError):
    pass


class SnapshotNotFound(DriverError):
    pass


class NodeNotFound(DriverError):
    pass


class Incompatible(DriverError):
    """The same name or target already exists with different arguments (ALREADY_EXISTS)."""


class CapacityOutOfRange(DriverError):
    pass


class NoCapacity(DriverError):
    """The pool can't hold the volume (RESOURCE_EXHAUSTED)."""


class TopologyUnsatisfiable(DriverError):
    pass


class SourceElsewhere(TopologyUnsatisfiable):
    """A restore or clone asked on a node whose local pool lacks the source (RESOURCE_EXHAUSTED,
    so the provisioner reschedules)."""


class NodeVolumeLimit(DriverError):
    pass


class PublishedElsewhere(DriverError):
    """A single-node volume is held by another node: the multi-attach refusal."""


class StillPublished(DriverError):
    """The volume is in use (published or staged) and the operation needs it free."""


class NotStaged(DriverError):
    pass


class GenerationRevoked(DriverError):
    """The caller presents a fencing token that the ledger has since revoked."""


class WrongAccessForVolume(DriverError):
    """The capability asked for at the node does not fit how the volume is staged."""


class Busy(DriverError):
    """Another operation on the same volume is in flight (ABORTED; the CO retries)."""


class FreezeTimedOut(DriverError):
    """A filesystem was frozen past --max-freeze-seconds and thawed under the copy, which is
    therefore not consistent (ABORTED; the CO retries)."""


class BadPageToken(DriverError):
    pass


class NodeAlive(DriverError):
    """Force-detach refused: the holder still heartbeats, so it may still be writing."""


class NodeSilent(DriverError):
    """A new hold refused: the node's heartbeat is older than the grace period. A node that
    may have been force-detached must not be handed the volume back by a retry."""


class NotReady(DriverError):
    """Probe: the plugin can't serve (a tool, device or the store is missing)."""


class NotImplementedHere(DriverError):
    """An RPC whose capability this driver does not advertise (UNIMPLEMENTED)."""


class OnlineResizeUnavailable(DriverError):
    """The filesystem can't grow while mounted here; it grows on its next stage."""


class NotGrownHere(DriverError):
    """The node's device holds less than the node expansion asks: the controller's growth has
    not reached it yet, and asking for less would not help (ABORTED, retried)."""


class TargetBusy(DriverError):
    """A path can't be unmounted now: a process or a nested mount holds it (the CO retries)."""


class HeldElsewhere(DriverError):
    """The volume's device is still in use by a mount this plugin can't see (a copy of an old
    mount in another mount namespace); the call succeeds once it goes (UNAVAILABLE)."""


class ForeignMount(DriverError):
    """Something other than the volume is mounted where the volume is: never unmounted for it,
    and the volume is not torn down from under it (FAILED_PRECONDITION)."""


class PathDiverted(DriverError):
    """A path the volume was mounted at now leads through a symbolic link: the driver never
    unmounts through one, and the volume's mount stays where it is (FAILED_PRECONDITION)."""

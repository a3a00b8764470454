"""Hostile requests and raw bytes over gRPC to one long-lived `--mode all` driver, real or fake.

Every request message of the Identity, Controller and Node services is generated from its
protobuf descriptor: random and hostile strings ("..", "/", NUL, 129-byte IDs, 5 KiB maps),
negative and huge integers, unknown enum values, oneofs left empty, fields left unset, unknown
fields appended. Fields the driver acts on are drawn partly from what exists (the seed volumes,
their publish contexts and paths), so that requests get past the first checks.

For every example: the answer is a status code of the spec (never UNKNOWN, never INTERNAL), the
process is still alive, no mount appeared or vanished outside the work directory, and nothing was
created at a path the request named outside it. Given paths are kept inside the work directory
except hostile ones (relative, with '..', with NUL), which the driver must refuse or ignore. After
each RPC's run, Probe answers ready. Then raw malformed protobuf bytes go to every method.
"""

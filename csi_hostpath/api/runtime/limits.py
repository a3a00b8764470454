"""CSI's size limits and the driver's text rules, applied to every field of every request.

Beside api/runtime/required.py in the call pipeline (api/runtime/pipeline.py calls both before
the servicer runs), so no name, ID, parameter or path reaches a service, the store or a log line
unmeasured. The rules themselves are core/request_text.py's; this module only walks the
message, so a field added to csi.proto is covered without a line here."""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from csi_hostpath.core import request_text
from csi_hostpath.core.errors import InvalidRequest

# The class whose parameters each request carries, for the message that names an unknown key.
# GetCapacity's and ValidateVolumeCapabilities' parameters are only read back, never acted on. A
# VolumeGroupSnapshotClass's are only measured too: Kubernetes' own storage suite makes its class
# with `deletionPolicy` among them (test/e2e/storage/testsuites/volume_group_snapshottable.go),
# so refusing an unknown key there would fail a class the CO's own tests write.
CLASS_PARAMETERS: dict[str, str] = {
    "CreateVolumeRequest": "StorageClass parameter",
    "CreateSnapshotRequest": "VolumeSnapshotClass parameter",
}


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _problem(message: Message, where: str) -> str | None:
    for field, value in message.ListFields():
        name = f"{where}{field.name}"
        if _is_map(field):
            problem = request_text.map_problem(
                name, dict(value), text_rules=field.name != "secrets"
            )
        elif field.message_type is not None:
            items = value if field.is_repeated else [value]
            found = (_problem(item, f"{name}.") for item in items)
            problem = next((p for p in found if p is not None), None)
        elif field.type == FieldDescriptor.TYPE_STRING:
            check = (
                request_text.path_problem
                if field.name.endswith("_path")
                else request_text.string_problem
            )
            texts = value if field.is_repeated else [value]
            problem = next((p for p in (check(name, t) for t in texts) if p is not None), None)
        else:
            problem = None
        if problem is not None:
            return problem
    return None


def check(request: Message) -> None:
    """Raise InvalidRequest for the first field beyond its size limit or holding a control
    character, and for a class parameter the driver does not know."""
    problem = _problem(request, "")
    if problem is None and (what := CLASS_PARAMETERS.get(request.DESCRIPTOR.name)):
        present = {field.name: value for field, value in request.ListFields()}
        problem = request_text.unknown_parameters(what, present.get("parameters", {}))
    if problem is not None:
        raise InvalidRequest(problem)

"""doctor: the machine's own checks: loop devices, the kernel's filesystems, capabilities and
the tools the driver runs."""

from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from csi_hostpath.doctor.finding import Finding, Status
from csi_hostpath.system.base import DeviceNodeError
from csi_hostpath.system.linux import LOOP_CONTROL, LOOP_CTL_GET_FREE, SYS_LOOP_CONTROL
from csi_hostpath.system.linux.devnodes import loop_node, open_control

# Where the checks look; module attributes so that tests can point them at prepared files.
SYS_BLOCK = "/sys/block"
PROC_FILESYSTEMS = "/proc/filesystems"
PROC_STATUS = "/proc/self/status"
MODULES_DIR = "/lib/modules"

CAP_SYS_RESOURCE = 24  # linux/capability.h

# A container's /dev may be a static copy (a kind node's): the driver makes the loop nodes it
# lacks, which the container's device rules must allow.
_PRIVILEGED = (
    "in a container, run it privileged (securityContext.privileged: true), so that it may use "
    "loop devices and make their nodes in its /dev"
)
_PRIVILEGED_ROOT = "run it as root"
_MADE = "this /dev lacked its node: made here, as the driver does"


@dataclass(frozen=True, slots=True)
class _Tool:
    name: str
    missing: Status
    consequence: str
    package: str  # Debian/Ubuntu; the same name on RHEL and Alpine unless `elsewhere` says
    elsewhere: str = ""


# What the driver runs, how bad its absence is, and where to get it (Debian/Ubuntu first).
TOOLS: tuple[_Tool, ...] = (
    _Tool("mkfs.ext4", "fail", "ext4 volumes can't be formatted", "e2fsprogs"),
    _Tool(
        "blkid",
        "fail",
        "the driver can't tell a formatted volume from an empty one, so no filesystem volume "
        "can be staged",
        "util-linux",
    ),
    _Tool("mount", "fail", "no volume can be staged or published", "mount", "util-linux"),
    _Tool("umount", "fail", "no volume can be unstaged or unpublished", "mount", "util-linux"),
    _Tool("mkfs.xfs", "warn", "xfs volumes can't be staged", "xfsprogs"),
    _Tool("xfs_growfs", "warn", "xfs volumes can't be expanded", "xfsprogs"),
    _Tool(
        "e2fsck",
        "warn",
        "ext4 volumes can't be grown offline (expanded, restored or cloned larger)",
        "e2fsprogs",
    ),
    _Tool("resize2fs", "warn", "ext4 volumes can't be expanded", "e2fsprogs"),
)


# --- loop devices ----------------------------------------------------------------------------


def check_loop_control() -> list[Finding]:
    """loop-control opens read-write, made from sysfs first where /dev lacks it, as the
    driver's attach does."""
    path = LOOP_CONTROL
    fix = f"load the loop driver on the host: `modprobe loop`; {_PRIVILEGED}"
    if os.geteuid() != 0:  # as root, a refusal comes from the container's device rules
        fix = f"{_PRIVILEGED_ROOT}; {fix}"
    made = not os.path.exists(path)
    try:
        fd = open_control(path, SYS_LOOP_CONTROL)
    except DeviceNodeError as exc:
        return [Finding("loop-control", "fail", str(exc), fix)]
    except OSError as exc:
        detail = f"{path} can't be opened read-write: {exc.strerror}"
        return [Finding("loop-control", "fail", detail, fix)]
    os.close(fd)
    how = f" ({_MADE})" if made else ""
    return [Finding("loop-control", "ok", f"{path} opens read-write{how}")]


def _loop_counts() -> tuple[int, int]:
    """(loop devices the kernel has, how many of them are attached to a file)."""
    present = configured = 0
    try:
        names = os.listdir(SYS_BLOCK)
    except OSError:
        return 0, 0
    for name in names:
        if name.startswith("loop") and name[4:].isdigit():
            present += 1
            if os.path.exists(os.path.join(SYS_BLOCK, name, "loop", "backing_file")):
                configured += 1
    return present, configured


def check_loop_devices(pool_dir: Path) -> list[Finding]:
    present, configured = _loop_counts()
    counts = f"{present} loop devices, {configured} attached"
    try:
        control = open_control(LOOP_CONTROL, SYS_LOOP_CONTROL)
    except (DeviceNodeError, OSError) as exc:
        detail = f"{counts}; can't ask the kernel for a free one: {exc}"
        return [Finding("loop-devices", "warn", detail, "fix loop-control first (above)")]
    try:
        # Hands out an unattached device, adding one if there is none; nothing stays attached.
        index = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
    except OSError as exc:
        detail = f"{counts}; the kernel has no free loop device: {exc.strerror}"
        fix = (
            "`losetup -l` lists what holds them (this driver's are backed by "
            f"{pool_dir}/volumes/*.img); detach leaked ones with `losetup -d /dev/loopN`, or "
            "allow more: `modprobe loop max_loop=N` (boot option max_loop=N if built in)"
        )
        return [Finding("loop-devices", "warn", detail, fix)]
    finally:
        os.close(control)
    device = f"/dev/loop{index}"
    made = not os.path.exists(device)
    try:
        # The node as the driver's attach sees it: made where /dev lacks it, refused when it
        # is another device's.
        loop_node(index)
    except DeviceNodeError as exc:
        return [Finding("loop-devices", "fail", f"{counts}; {exc}", _PRIVILEGED)]
    how = f" ({_MADE})" if made else ""
    return [Finding("loop-devices", "ok", f"{counts}{how}; {device} is free")]


# --- kernel ----------------------------------------------------------------------------------


def _registered_filesystems() -> set[str]:
    # Lines are "nodev\tproc" or "\text4": the name is always the last field.
    with open(PROC_FILESYSTEMS, encoding="utf-8") as handle:
        return {line.split()[-1] for line in handle if line.strip()}


def _find_module(release: str, fs: str) -> str | None:
    """The module file for fs under /lib/modules/RELEASE, if the kernel could load one."""
    root = Path(MODULES_DIR) / release
    try:
        # modules.dep lists every loadable module wherever the distribution put it.
        text = (root / "modules.dep").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        module = line.split(":", 1)[0].strip()
        if os.path.basename(module).split(".ko", 1)[0] == fs:
            return str(root / module)
    found = sorted(root.glob(f"kernel/fs/{fs}/{fs}.ko*"))
    return str(found[0]) if found else None


def check_kernel_filesystems() -> list[Finding]:
    registered = _registered_filesystems()
    release = os.uname().release
    wanted: tuple[tuple[str, Status, str], ...] = (
        (
            "ext4",
            "fail",
            "load it on the host: `modprobe ext4`; a kernel built without ext4 (CONFIG_EXT4_FS) "
            "can't serve this driver's default volumes",
        ),
        (
            "xfs",
            "warn",
            "load it on the host: `modprobe xfs` (Ubuntu ships it in "
            "linux-modules-extra-$(uname -r)); until then use fsType ext4",
        ),
    )
    findings = []
    for fs, missing, fix in wanted:
        check = f"kernel-fs:{fs}"
        if fs in registered:
            findings.append(Finding(check, "ok", f"{fs} is registered ({PROC_FILESYSTEMS})"))
            continue
        module = _find_module(release, fs)
        if module is not None:
            # Mounting asks the kernel to load it, from the host even when run in a container.
            detail = f"{fs} is not loaded yet; {module} loads on the first mount"
            findings.append(Finding(check, "ok", detail))
            continue
        detail = (
            f"{fs} is not in {PROC_FILESYSTEMS} and no {fs} module is under {MODULES_DIR}/{release}"
        )
        findings.append(Finding(check, missing, detail, fix))
    return findings


def check_capabilities() -> list[Finding]:
    # This process's capabilities stand for the daemon's: run the doctor in the daemon's
    # container (kubectl exec) and both get the same set.
    with open(PROC_STATUS, encoding="utf-8") as handle:
        lines = [line for line in handle if line.startswith("CapEff:")]
    if not lines:
        return [
            Finding(
                "cap-sys-resource",
                "warn",
                f"no CapEff line in {PROC_STATUS}",
                "check by hand: `grep CapEff /proc/self/status` (bit 24 is CAP_SYS_RESOURCE)",
            )
        ]
    effective = int(lines[0].split()[1], 16)
    if effective >> CAP_SYS_RESOURCE & 1:
        return [Finding("cap-sys-resource", "ok", "CAP_SYS_RESOURCE: yes (ext4 grows online)")]
    return [
        Finding(
            "cap-sys-resource",
            "warn",
            "CAP_SYS_RESOURCE is not in CapEff: online ext4 expansion will be refused; ext4 "
            "grows on next stage",
            "run the node plugin privileged (securityContext.privileged: true), or add the "
            "SYS_RESOURCE capability",
        )
    ]


# --- tools -----------------------------------------------------------------------------------


def check_tools(search_path: str) -> list[Finding]:
    findings = []
    for tool in TOOLS:
        check = f"tool:{tool.name}"
        found = shutil.which(tool.name, path=search_path)
        if found is not None:
            findings.append(Finding(check, "ok", found))
            continue
        detail = f"{tool.name} not found on PATH: {tool.consequence}"
        elsewhere = f" ({tool.elsewhere} on RHEL and Alpine)" if tool.elsewhere else ""
        fix = (
            f"install it: `apt-get install {tool.package}`{elsewhere}, or add the directory "
            f"holding {tool.name} to PATH (searched: {search_path or '(empty)'})"
        )
        findings.append(Finding(check, tool.missing, detail, fix))
    return findings

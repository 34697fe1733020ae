"""Boot the lane's OpenZFS guest under qemu (TCG), reach it over ssh, and cut its power.

Used by the lane runner (lane.py) and by host-side tests that kill the whole guest (power cuts).
Every guest runs on a throw-away qcow2 overlay of the cached root image, so the image is never
changed; its pool disks are sparse raw files in the guest's work directory, and survive a power
cut and a reboot of the same Guest (as a disk would)."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("REBAL_OPENZFS_CACHE", "/var/cache/rebal-openzfs"))
BOOT_TIMEOUT = 240.0  # seconds; measured 31 s to ssh on a 2-core host under TCG


def _disk(i: int, path: Path, fmt: str, sector_4k: bool = False) -> list[str]:
    dev = f"virtio-blk-pci,drive=d{i}" + (",physical_block_size=4096,logical_block_size=512" if sector_4k else "")
    return ["-drive", f"file={path},format={fmt},if=none,id=d{i},cache=unsafe", "-device", dev]


class GuestError(Exception):
    pass


def image_dir(build: bool = True) -> Path:
    """The cached image directory (built by build.sh when missing and ``build`` is true)."""
    if build:
        r = subprocess.run(["bash", str(HERE / "build.sh")], stdout=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise GuestError("building the OpenZFS image failed (see the lines above)")
        return Path(r.stdout.strip().splitlines()[-1])
    import hashlib

    h = hashlib.sha256((HERE / "build.sh").read_bytes() + (HERE / "packages.txt").read_bytes()).hexdigest()[:16]
    d = CACHE / h
    if not (d / "ready").exists():
        raise GuestError(f"no cached OpenZFS image at {d} (bash tests/openzfs/vm/build.sh builds it)")
    return d


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Guest:
    """One guest machine: ``boot()``, ``ssh()``, ``power_cut()``, ``boot()`` again, ``shutdown()``."""

    def __init__(self, workdir: Path, disks: int = 8, disk_size: str = "2G", memory: str = "4096",
                 image: Path | None = None, disks_4k: int = 0) -> None:
        """``disks_4k``: that many more disks after the others, with 4 KiB physical sectors (512-byte
        logical ones, as most SATA disks today): where a pool made with ashift=9 is slow."""
        self.image = image or image_dir(build=False)
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = self.image / "id_ed25519"
        self.memory = memory
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.boots = 0
        self.overlay = self.dir / "root.qcow2"
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(self.image / "root.img"),
                        str(self.overlay)], check=True)
        self.disks = []
        self.plain = disks
        for i in range(disks + disks_4k):
            p = self.dir / f"disk{i}.img"
            subprocess.run(["truncate", "-s", disk_size, str(p)], check=True)
            self.disks.append(p)
        self.ctl = self.dir / "ssh-ctl"

    # -- life cycle --------------------------------------------------------------------------

    def boot(self, timeout: float = BOOT_TIMEOUT) -> float:
        """Start qemu and wait until ssh answers; returns the seconds it took."""
        if self.proc and self.proc.poll() is None:
            raise GuestError("the guest is already running")
        self.port = self.port or free_port()  # the same port after a power cut: others reach it there
        self.boots += 1
        console = self.dir / f"console-{self.boots}.log"
        argv = ["qemu-system-x86_64", "-machine", "q35,accel=tcg", "-cpu", "max", "-smp", "2", "-m", self.memory,
                "-display", "none", "-monitor", "none", "-serial", f"file:{console}", "-no-reboot",
                "-kernel", str(self.image / "vmlinuz"), "-initrd", str(self.image / "initrd.img"),
                "-append", "root=/dev/vda rw console=ttyS0 net.ifnames=0 quiet",
                *_disk(0, self.overlay, "qcow2")]
        # every disk an explicit device, in order: vda the root, then vdb, vdc, ... (a -device is
        # enumerated before any if=virtio drive, so mixing the two would rename the root disk)
        for i, d in enumerate(self.disks, 1):
            argv += _disk(i, d, "raw", sector_4k=i > self.plain)
        argv += ["-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{self.port}-:22", "-device", "virtio-net-pci,netdev=n0"]
        t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(self.dir / f"qemu-{self.boots}.err", "wb"), start_new_session=True)
        while True:
            if self.proc.poll() is not None:
                raise GuestError(f"qemu exited ({self.proc.returncode}) during boot: see {console}")
            if time.monotonic() - t0 > timeout:
                self.power_cut()
                raise GuestError(f"no ssh within {timeout:.0f} s: see {console}")
            r = self._ssh_argv(["true"], connect_timeout=3, master=False)
            if subprocess.run(r, stdin=subprocess.DEVNULL, capture_output=True, timeout=30).returncode == 0:
                return time.monotonic() - t0
            time.sleep(1.0)  # polling a booting machine for its sshd; bounded by ``timeout``

    def power_cut(self) -> None:
        """Kill qemu: the guest loses its page cache like a machine losing power. The disks keep
        what the guest had written to them."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self._drop_master()

    def shutdown(self, timeout: float = 60) -> None:
        if self.proc and self.proc.poll() is None:
            self.ssh("systemctl poweroff", check=False, timeout=15)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.power_cut()
        self._drop_master()

    @property
    def running(self) -> bool:
        return bool(self.proc and self.proc.poll() is None)

    # -- ssh ---------------------------------------------------------------------------------

    def _ssh_argv(self, remote: list[str] | str, connect_timeout: int = 10, master: bool = True) -> list[str]:
        argv = ["ssh", "-i", str(self.key), "-p", str(self.port), "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                "-o", f"ConnectTimeout={connect_timeout}", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
        if master:
            argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={self.ctl}", "-o", "ControlPersist=120"]
        cmd = remote if isinstance(remote, str) else shlex.join(remote)
        return argv + ["root@127.0.0.1", cmd]

    def ssh(self, remote: list[str] | str, check: bool = True, timeout: float = 600, stream: bool = False,
            input: bytes | None = None) -> subprocess.CompletedProcess:
        """Run a command in the guest (a list is quoted; a string is a guest shell line)."""
        argv = self._ssh_argv(remote)
        if stream:
            r = subprocess.run(argv, timeout=timeout, input=input)
        else:
            r = subprocess.run(argv, capture_output=True, text=input is None, timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise GuestError(f"guest: {remote!r} exited {r.returncode}: {getattr(r, 'stderr', '') or ''}")
        return r

    def ssh_bg(self, remote: list[str] | str) -> subprocess.Popen:
        """Start a command in the guest and return at once (its ssh ends with the guest)."""
        return subprocess.Popen(self._ssh_argv(remote, master=False), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)

    def put(self, local: Path, remote_dir: str) -> None:
        """Copy a file or directory into ``remote_dir`` of the guest (tar over ssh)."""
        local = Path(local)
        tar = subprocess.Popen(["tar", "-C", str(local.parent), "-cf", "-", local.name], stdout=subprocess.PIPE)
        r = subprocess.run(self._ssh_argv(f"mkdir -p {shlex.quote(remote_dir)} && tar -C {shlex.quote(remote_dir)} -xf -"),
                           stdin=tar.stdout, capture_output=True, timeout=600)
        tar.wait()
        if r.returncode != 0 or tar.returncode != 0:
            raise GuestError(f"copying {local} into the guest failed: {r.stderr.decode(errors='replace')}")

    def _drop_master(self) -> None:
        if self.ctl.exists():
            subprocess.run(["ssh", "-o", f"ControlPath={self.ctl}", "-O", "exit", "x"], capture_output=True, timeout=10)
            try:
                self.ctl.unlink()
            except FileNotFoundError:
                pass


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--cached"]:  # exit 0 when the image of this recipe is built (for .ci/run)
        try:
            print(image_dir(build=False))
        except GuestError as e:
            print(e, file=sys.stderr)
            sys.exit(1)
        sys.exit(0)
    print("usage: guest.py --cached", file=sys.stderr)
    sys.exit(2)

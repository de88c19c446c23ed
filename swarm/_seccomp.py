"""A seccomp filter for the sandbox, compiled by libseccomp (through ctypes) and loaded by bubblewrap.

An extra layer on top of the namespaces: it refuses system calls sandboxed Python has no business
making and that widen the kernel surface or reach state no namespace isolates (the kernel keyring,
BPF, perf events, userfaultfd, io_uring, module loading), and ``fallocate`` (so a program cannot
reserve gigabytes of workspace disk between two looks of the quota watchdog; callers fall back to
writing, which the watchdog sees). Without a cgroup to account memfd pages, ``memfd_create`` is refused
too. Other architectures' system calls (e.g. 32-bit ``int 0x80``) kill the process (libseccomp's
default for a foreign architecture).

Where libseccomp is missing, :func:`program` returns None and the sandbox runs without this layer
(the result's notes say so).
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading

__all__ = ["program"]

_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_DENY = {
    "fallocate": errno.EOPNOTSUPP,
    "keyctl": errno.EPERM,
    "add_key": errno.EPERM,
    "request_key": errno.EPERM,
    "bpf": errno.EPERM,
    "perf_event_open": errno.EPERM,
    "userfaultfd": errno.EPERM,
    "io_uring_setup": errno.ENOSYS,
    "io_uring_enter": errno.ENOSYS,
    "io_uring_register": errno.ENOSYS,
    "kexec_load": errno.EPERM,
    "kexec_file_load": errno.EPERM,
    "init_module": errno.EPERM,
    "finit_module": errno.EPERM,
    "delete_module": errno.EPERM,
    "open_by_handle_at": errno.EPERM,
    "name_to_handle_at": errno.EPERM,
    "syslog": errno.EPERM,
    "acct": errno.EPERM,
    "quotactl": errno.EPERM,
    "swapon": errno.EPERM,
    "swapoff": errno.EPERM,
    "reboot": errno.EPERM,
    "uselib": errno.EPERM,
}
_lock = threading.Lock()
_cache: dict[bool, bytes | None] = {}


def _compile(deny_memfd: bool) -> bytes | None:
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(_ALLOW)
    if not ctx:
        return None
    try:
        deny = dict(_DENY)
        if deny_memfd:
            deny["memfd_create"] = errno.EPERM
        for name, err in deny.items():
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:
                continue  # not a system call on this architecture
            if lib.seccomp_rule_add(ctx, _ERRNO | err, nr, 0) != 0:
                return None
        fd = os.memfd_create("swarm-seccomp", os.MFD_CLOEXEC)
        try:
            if lib.seccomp_export_bpf(ctx, fd) != 0:
                return None
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)


def program(*, deny_memfd: bool) -> bytes | None:
    """The compiled BPF filter (cached), or None where libseccomp cannot be loaded."""
    with _lock:
        if deny_memfd not in _cache:
            _cache[deny_memfd] = _compile(deny_memfd)
        return _cache[deny_memfd]

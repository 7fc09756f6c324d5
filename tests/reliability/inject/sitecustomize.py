"""Loaded by the app under test (its PYTHONPATH starts here) when no small tmpfs can be mounted: while the
flag file exists, flushing a file inside the outputs folder fails with ENOSPC, as on a full disk."""

import errno
import os
import sys

_FLAG = os.environ.get("COSYVOICE_TEST_FULL_DISK_FLAG")
_FOLDER = os.environ.get("COSYVOICE_TEST_FULL_DISK_DIR")


def _path_of(fd: int) -> str:
    try:
        if sys.platform == "darwin":
            import fcntl

            return fcntl.fcntl(fd, 50, b"\0" * 1024).split(b"\0", 1)[0].decode()  # F_GETPATH
        return os.readlink(f"/proc/self/fd/{fd}")
    except (OSError, ValueError):
        return ""


if _FLAG and _FOLDER:
    _real_fsync = os.fsync

    def _fsync(fd):
        if os.path.exists(_FLAG) and _path_of(fd if isinstance(fd, int) else fd.fileno()).startswith(_FOLDER):
            raise OSError(errno.ENOSPC, "No space left on device (simulated full disk)")
        return _real_fsync(fd)

    os.fsync = _fsync

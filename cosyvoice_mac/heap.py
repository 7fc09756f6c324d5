"""Giving the C heap's freed pages back to the operating system, for every process of the app.

glibc keeps the pages a process freed (a decoded prompt, a checkpoint's float32 temporaries, a job's
buffers) for its next allocation, so a long-lived process grows to its peak and stays there. The page's
process, the model worker and the checkpoint loader each ask for them back at a quiet moment. Standard
library only: the page's process imports it without torch.
"""

from __future__ import annotations

import ctypes
import sys


def return_freed_heap() -> None:
    """glibc's ``malloc_trim(0)`` on Linux; nothing elsewhere (macOS returns freed pages itself, musl has none)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl): nothing to trim
        pass

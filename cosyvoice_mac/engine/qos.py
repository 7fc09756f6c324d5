"""macOS thread quality-of-service classes, so the scheduler favours the UI and keeps the model busy.

On macOS the calling thread's class is set with ``pthread_set_qos_class_self_np`` (libSystem);
elsewhere every call is a no-op that returns False.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# qos_class_t values from <sys/qos.h>.
QOS_CLASSES = {
    "user_interactive": 0x21,
    "user_initiated": 0x19,
    "default": 0x15,
    "utility": 0x11,
    "background": 0x09,
}


def _libsystem():
    path = ctypes.util.find_library("System") or "/usr/lib/libSystem.B.dylib"
    return ctypes.CDLL(path, use_errno=True)


def set_thread_qos(qos_class: str, relative_priority: int = 0) -> bool:
    """Set the calling thread's QoS class (a key of QOS_CLASSES); True when the OS accepted it.

    Never raises for a platform or OS refusal: a missed hint must not stop the app.
    """
    if qos_class not in QOS_CLASSES:
        raise ValueError(f"unknown QoS class {qos_class!r}; expected one of {sorted(QOS_CLASSES)}")
    if not -15 <= relative_priority <= 0:
        raise ValueError(f"relative_priority {relative_priority} must be between -15 and 0")
    if sys.platform != "darwin":
        return False
    try:
        setter = _libsystem().pthread_set_qos_class_self_np
    except (OSError, AttributeError):
        return False
    setter.argtypes = [ctypes.c_uint, ctypes.c_int]
    setter.restype = ctypes.c_int
    return setter(QOS_CLASSES[qos_class], relative_priority) == 0


def set_ui_thread_qos() -> bool:
    """The thread that serves the user: user-interactive."""
    return set_thread_qos("user_interactive")


def set_worker_thread_qos() -> bool:
    """The model worker's compute thread: user-initiated (the user is waiting for it)."""
    return set_thread_qos("user_initiated")

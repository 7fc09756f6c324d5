"""Long-form work on a Ray cluster: the lines of one job spread over the workers of several machines.

One actor per worker slot (``SLOT_RESOURCE``, declared by each machine when it joins: one per GPU, or one for
a Mac) runs this app's own worker code (``engine.runtime.WorkerRuntime``) with the model and precision
chosen for ITS machine (``actor.py``). The driver (the CLI process) keeps what a local run keeps: the
manifest, the resume rule, outputs/ with sidecars (each naming the machine that made its line), the zip and
the report (``speak.ClusterSpeak``, a ``longform.runner.Speak``). Lines travel in groups (``dispatch.py``);
an actor that dies takes its groups back to the others, and only the driver saves a line, so each line is
saved once. Everything that crosses a machine is a dataclass of ``wire.py``; a voice travels as its
recording, transcript and feature hash, never as a path on the driver's disk.

Ray is an optional extra (``pip install ".[cluster]"``); only ``pool.py`` and ``dispatch.py`` import it.
"""

from __future__ import annotations

from cosyvoice_mac.errors import CosyVoiceError

SLOT_RESOURCE = "cosyvoice"  # a Ray resource: how many workers a machine runs (ray start --resources)
LOCAL_PREFIX = "local:"  # --cluster local:N starts N workers on this computer (tests, trying it out)


class ClusterError(CosyVoiceError):
    """The cluster cannot take the job (no Ray, no worker, a worker refused, every worker lost); the message
    names the machine and what to do."""


class ClusterStopped(ClusterError):
    """The job was stopped (Ctrl-C) while a line was on the cluster."""


def said_by(error: BaseException, last: bool = False, limit: int = 300) -> str:
    """One line of what ``error`` says (Ray's errors are many lines; the first says what, a worker's traceback
    ends with why: ``last``), or its type's name when it says nothing."""
    lines = str(error).strip().splitlines()
    return (lines[-1] if last else lines[0])[:limit] if lines else type(error).__name__

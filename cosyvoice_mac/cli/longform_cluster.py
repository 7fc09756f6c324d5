"""The long-form commands on a Ray cluster (``--cluster ADDRESS``, ``$RAY_ADDRESS``, ``--cluster local:N``): this
process is the driver (the manifest, outputs/, the zip and the report stay on this machine); the lines go to
the cluster's workers (``cosyvoice_mac.cluster``). Ctrl-C cancels the lines on every worker and keeps the
finished ones, as a local run does.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

from cosyvoice_mac.cli.common import CommandFailed, host_precision, host_vocoder
from cosyvoice_mac.settings import env_value


def cluster_address(args) -> str | None:
    """The cluster to use: ``--cluster``, else ``$RAY_ADDRESS`` unless ``--local`` or ``--server`` says
    where the job runs; None: not on a cluster."""
    if args.cluster and args.server:
        raise CommandFailed("--cluster runs the job from this process on the cluster's workers; leave out --server")
    if args.cluster:
        return args.cluster.strip()
    return None if args.local or args.server else env_value("cluster")


def model_ask(args):
    """What every worker runs: ``--model`` (its folder name, looked up in each worker's models folder), else
    the model this machine would pick; the build flags as given (what they leave open, each worker decides)."""
    from cosyvoice_mac import __version__
    from cosyvoice_mac.cluster.wire import ModelAsk
    from cosyvoice_mac.engine.host import pick_model
    from cosyvoice_mac.paths import default_models_dir
    from cosyvoice_mac.preview import PREVIEW

    if args.model is not None:
        model = str(args.model)
    else:
        choice = pick_model(Path(args.models_dir or default_models_dir()).expanduser())
        model = PREVIEW if choice is None or choice.is_preview else choice.name
    return ModelAsk(
        model,
        __version__,
        device=args.device,
        dtype=args.dtype,
        precision=host_precision(args),
        engine=args.engine,
        vocoder=host_vocoder(args),
    )


@contextmanager
def cluster_speak(args, here, address: str):
    """The job's ``ClusterSpeak`` (this process the driver, the cluster's workers speaking its lines), its
    workers said on stderr; at the end, what each worker made and each one lost, and the workers closed."""
    from cosyvoice_mac.cluster.pool import WorkerPool
    from cosyvoice_mac.cluster.speak import ClusterSpeak
    from cosyvoice_mac.frontend.glossary import glossary_store
    from cosyvoice_mac.paths import default_outputs_dir

    here.check()  # saved voices this machine knows, before any worker starts
    outputs = Path(args.outputs_dir or default_outputs_dir()).expanduser()
    glossary, note = glossary_store().usable_entries()  # sent to every worker, which applies it to each line
    if note:
        print(f"note: {note}", file=sys.stderr)
    ask = model_ask(args)
    print(f"starting the workers of the cluster at {address} ({ask.model} on each)", file=sys.stderr)
    pool = WorkerPool.open(address, ask, glossary)
    try:
        for worker in pool.workers:
            print(f"worker {worker.facts.describe()}", file=sys.stderr)
        check = False if getattr(args, "no_check", False) else None
        speak = ClusterSpeak(pool, outputs, glossary, here.default_voice, interface="cli", check=check)
        yield speak
        for said in speak.summary():
            print(f"cluster: {said}", file=sys.stderr)
    finally:
        pool.close()

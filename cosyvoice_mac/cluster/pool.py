"""The driver's hold on the cluster: connecting (an address, or ``local:N`` started here), one actor per worker
slot (``SLOT_RESOURCE``), each checked and loaded before any line is sent, the job's voices handed to every
worker, and closing it all again.

A worker that cannot run the job (no model folder, another app version, a model that does not load) stops
the job here, before any line: the message names each such machine and why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cosyvoice_mac.cluster import LOCAL_PREFIX, SLOT_RESOURCE, ClusterError, said_by
from cosyvoice_mac.cluster.actor import LineWorker
from cosyvoice_mac.cluster.wire import ModelAsk, VoiceParcel, WorkerFacts

GROUPS_IN_FLIGHT = 2  # per worker: one speaking, one waiting in its queue (it never waits for the driver)
START_TIMEOUT_S = 900.0  # a first load on a slow machine (the precision probe, a Core ML conversion) takes minutes
CLOSE_TIMEOUT_S = 5.0  # for a worker to remove its scratch folder before it is killed
INSTALL_HINT = 'Ray is not installed here: pip install ".[cluster]" (or: bash run.sh setup, which installs it)'


def import_ray():
    """The ray module; ClusterError saying how to install it where it is missing."""
    try:
        import ray
    except ImportError:
        raise ClusterError(INSTALL_HINT) from None
    return ray


def local_workers(address: str) -> int | None:
    """N of ``local:N`` (ClusterError unless 1-64), None for any other address."""
    if not address.startswith(LOCAL_PREFIX):
        return None
    count = address[len(LOCAL_PREFIX) :]
    if not count.isdigit() or not 1 <= int(count) <= 64:
        raise ClusterError(f"--cluster {address}: local:N takes a number of workers from 1 to 64, e.g. local:2")
    return int(count)


def connect(address: str) -> bool:
    """Tie this process to the cluster at ``address`` (``host:port`` or ``ray://host:port``), or start
    ``local:N`` here (N workers, no dashboard). True when it started or joined one now (``close`` then lets
    go); False when this process was already tied to one (a test's, or the app's), which stays."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    count = local_workers(address)
    try:
        if count is not None:
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # a cluster of this computer reports nowhere
            ray.init(
                address="local",  # a new one, even where $RAY_ADDRESS names another
                num_cpus=count,
                resources={SLOT_RESOURCE: count},
                include_dashboard=False,
                log_to_driver=False,
                logging_level="warning",
            )
        else:
            ray.init(address=address, log_to_driver=False, logging_level="warning")
    except (ConnectionError, RuntimeError, ValueError) as error:  # none there, or no address Ray can read
        raise ClusterError(
            f"no Ray cluster answers at {address} ({said_by(error)}); start its head with `ray start --head` "
            "(docs/cluster.md) or give its address"
        ) from None
    return True


@dataclass(frozen=True)
class Node:
    """A machine of the cluster that offers worker slots, and its GPUs (each slot gets one when there are enough)."""

    node_id: str
    host: str
    slots: int
    gpus: int


def worker_nodes() -> list[Node]:
    """The live machines that declare ``SLOT_RESOURCE``; ClusterError when none does."""
    nodes = [
        Node(
            node["NodeID"],
            node.get("NodeManagerHostname") or node.get("NodeManagerAddress", "?"),
            int(node["Resources"].get(SLOT_RESOURCE, 0)),
            int(node["Resources"].get("GPU", 0)),
        )
        for node in import_ray().nodes()
        if node.get("Alive")
    ]
    nodes = [node for node in nodes if node.slots > 0]
    if not nodes:
        raise ClusterError(
            f"no machine of the cluster offers a worker: start each with "
            f"`ray start ... --resources '{{\"{SLOT_RESOURCE}\": 1}}'` (one per GPU, or 1 for a Mac; docs/cluster.md)"
        )
    return nodes


def _gather(doing: str, refs: list) -> list:
    """Every worker's answer to a start-up question; ClusterError when one does not come (a worker that died
    while ``doing`` it: often an app missing on that machine), or not within START_TIMEOUT_S."""
    ray = import_ray()
    try:
        return ray.get(refs, timeout=START_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        raise ClusterError(
            f"the cluster's workers did not finish {doing} within {START_TIMEOUT_S:.0f} s (are their slots held "
            "by another job?)"
        ) from None
    except ray.exceptions.RayError as error:
        raise ClusterError(
            f"a worker failed while {doing} ({type(error).__name__}: {said_by(error)}); is "
            "cosyvoice-mac installed on every machine of the cluster?"
        ) from None


@dataclass
class Worker:
    """The driver's record of one actor: its handle, its facts, and whether it is alive."""

    handle: object
    facts: WorkerFacts
    alive: bool = True

    @property
    def name(self) -> str:
        return self.facts.name


class WorkerPool:
    """Owns the job's actors (one per worker slot of the cluster) and this process's tie to the cluster
    when it made that tie (``connect``): ``close`` ends both."""

    def __init__(self, workers: list[Worker], let_go: bool):
        self.workers, self._let_go = workers, let_go
        self._groups_sent = 0

    @classmethod
    def open(cls, address: str, ask: ModelAsk, glossary=(), kind: type = LineWorker, extra: tuple = ()) -> "WorkerPool":
        """Connect, start an actor per slot (a ``kind``: LineWorker, or the app queue's JobWorker, made with
        ``(slot, slots_here, *extra)``), have each check (no model folder? another version?) and then load the
        model for its machine; ClusterError naming every worker that cannot, before any line."""
        ray = import_ray()
        let_go = connect(address)
        pool = cls([], let_go)
        try:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            actor = ray.remote(kind)
            for node in worker_nodes():
                for slot in range(node.slots):
                    options = {
                        "num_cpus": 0,  # the slot resource decides where workers go
                        "resources": {SLOT_RESOURCE: 1},
                        "max_concurrency": GROUPS_IN_FLIGHT + 1,  # ``stop`` beside the groups sent
                        "max_restarts": 0,  # a worker lost is lost: its lines go to the others
                        "scheduling_strategy": NodeAffinitySchedulingStrategy(node.node_id, soft=False),
                    }
                    if node.gpus >= node.slots:
                        options["num_gpus"] = node.gpus // node.slots  # Ray gives each worker its own GPU
                    handle = actor.options(**options).remote(slot, node.slots, *extra)
                    pool.workers.append(Worker(handle, WorkerFacts(f"{node.host}#{slot}", node.host, slot, 0)))
            pool._ask_all("checking", [worker.handle.check.remote(ask) for worker in pool.workers])
            pool._ask_all(
                "loading the model", [worker.handle.load.remote(ask, tuple(glossary)) for worker in pool.workers]
            )
        except BaseException:
            pool.close()
            raise
        return pool

    def _ask_all(self, doing: str, refs: list) -> None:
        """Wait for every worker's (facts, refusal) answer; ClusterError naming each refusal."""
        refusals = []
        for worker, (facts, refusal) in zip(self.workers, _gather(doing, refs)):
            worker.facts = facts
            if refusal:
                refusals.append(f"the worker {facts.name} {refusal}")
        if refusals:
            raise ClusterError("the cluster cannot run this job (no line was sent): " + "; ".join(refusals))

    def alive(self) -> list[Worker]:
        return [worker for worker in self.workers if worker.alive]

    def next_group_number(self) -> int:
        """A number no group sent to this pool's workers had (a worker cancels groups by number)."""
        self._groups_sent += 1
        return self._groups_sent

    def lose(self, worker: Worker) -> None:
        """``worker`` died (or its machine left): no job sends it more, and it is killed for sure, so it never
        comes back half-way through a line."""
        worker.alive = False
        try:
            import_ray().kill(worker.handle, no_restart=True)
        except Exception:  # already gone
            pass

    def take_voices(self, parcels: list[VoiceParcel]) -> dict[str, list[str]]:
        """Hand the voices to every live worker: voice name -> why each worker that cannot use it refused."""
        workers = self.alive()
        answers = _gather("taking the voices", [worker.handle.take_voices.remote(parcels) for worker in workers])
        refused: dict[str, list[str]] = {}
        for worker, outcomes in zip(workers, answers):
            for name, outcome in outcomes.items():
                if "error" in outcome:
                    refused.setdefault(name, []).append(f"{worker.name}: {outcome['error']}")
        return refused

    def close(self) -> None:
        """Let each worker remove its scratch folder, end every actor, and let go of a cluster tied here."""
        ray = import_ray()
        closing = []
        for worker in self.alive():
            try:
                closing.append(worker.handle.close.remote())
            except Exception:  # a handle of a dead actor: nothing to close
                pass
        if closing:
            ray.wait(closing, num_returns=len(closing), timeout=CLOSE_TIMEOUT_S)
        for worker in self.workers:
            try:
                ray.kill(worker.handle, no_restart=True)
            except Exception:  # already gone
                pass
            worker.alive = False
        if self._let_go:
            ray.shutdown()

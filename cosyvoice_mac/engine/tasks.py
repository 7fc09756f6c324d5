"""The UI process's book of worker tasks: short requests that are not syntheses (see ``jobs.Task``).

A task waits here until the supervisor can hand it to a ready worker; the worker runs it between jobs
and answers with messages.TaskDone / TaskError. A task sent to a worker that dies or restarts is
failed (the caller may simply ask again); one not sent yet waits for the next worker.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from cosyvoice_mac.engine.jobs import EngineError, Task
from cosyvoice_mac.engine.messages import Fault, TaskDone, TaskError


class TaskFailed(EngineError):
    """The worker could not do the task; the message says why (safe to show), ``fault`` whose fault it was
    (``messages.Fault``: the input's, or the model process that died meanwhile, ...)."""

    def __init__(self, message: str, fault: str = Fault.INPUT):
        super().__init__(message)
        self.fault = fault


@dataclass
class TaskTicket:
    """One task and its outcome: ``result`` (a plain dict) or ``error``, once ``done`` is set."""

    task: Task
    sent: bool = False
    result: dict | None = None
    error: str | None = None
    fault: str = Fault.INPUT
    done: threading.Event = field(default_factory=threading.Event)

    def resolve(self, result: dict | None = None, error: str | None = None, fault: str = Fault.INPUT) -> None:
        if not self.done.is_set():
            self.result, self.error, self.fault = result, error, fault
            self.done.set()


class TaskBook:
    """Owns the tasks that wait to be sent and those sent but not answered. Callers may hold ``lock``."""

    def __init__(self, lock: threading.RLock):
        self.lock = lock
        self._tickets: dict[str, TaskTicket] = {}

    def add(self, task: Task) -> TaskTicket:
        with self.lock:
            ticket = TaskTicket(task)
            self._tickets[task.task_id] = ticket
            return ticket

    def take_unsent(self) -> list[TaskTicket]:
        """The tasks not yet handed to a worker, marked as sent (in the order they came)."""
        with self.lock:
            waiting = [ticket for ticket in self._tickets.values() if not ticket.sent]
            for ticket in waiting:
                ticket.sent = True
            return waiting

    def unsend(self, ticket: TaskTicket) -> None:
        with self.lock:
            ticket.sent = False

    def answer(self, event: TaskDone | TaskError) -> None:
        """Resolve the ticket a worker's reply names (a reply to a forgotten task is dropped)."""
        with self.lock:
            ticket = self._tickets.pop(event.task_id, None)
        if ticket is None:
            return
        if isinstance(event, TaskDone):
            ticket.resolve(result=dict(event.result or {}))
        else:  # a traceback: the worker failed on it unexpectedly (not the input's fault)
            ticket.resolve(
                error=event.message or "the task failed", fault=Fault.ENGINE if event.traceback else Fault.INPUT
            )

    def fail_sent(self, message: str) -> None:
        """Fail every task a worker received but did not answer (it died or was restarted)."""
        with self.lock:
            lost = [key for key, ticket in self._tickets.items() if ticket.sent]
            tickets = [self._tickets.pop(key) for key in lost]
        for ticket in tickets:
            ticket.resolve(error=message, fault=Fault.RESTARTED)

    def fail_all(self, message: str) -> None:
        with self.lock:
            tickets, self._tickets = list(self._tickets.values()), {}
        for ticket in tickets:
            ticket.resolve(error=message, fault=Fault.UNAVAILABLE)

    def forget(self, ticket: TaskTicket) -> None:
        with self.lock:
            self._tickets.pop(ticket.task.task_id, None)

    @staticmethod
    def wait(ticket: TaskTicket, timeout: float | None) -> dict:
        """The task's result; TaskFailed with the worker's reason, or TimeoutError past ``timeout`` s."""
        if not ticket.done.wait(timeout):
            raise TimeoutError(f"the model did not finish the task ({ticket.task.kind}) within {timeout:g} s")
        if ticket.error is not None:
            raise TaskFailed(ticket.error, ticket.fault)
        return ticket.result or {}

"""Hands gRPC admin calls to the loop thread (which alone touches the engine and the sockets).

A job is (kind, payload, reply queue); the loop runs every queued job at each iteration and
answers on the reply queue. GenerateCodes jobs register an engine request whose outputs go to
that queue instead of a vocoder.
"""
from __future__ import annotations

import itertools
import logging
import queue
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from talker_service.engine import EngineError, ErrorOut
from talker_service.server.routes import Route

if TYPE_CHECKING:
    from talker_service.server.loop import TalkerServer

logger = logging.getLogger(__name__)


class JobsClosed(RuntimeError):
    pass


@dataclass
class Job:
    kind: str            # "stats" | "generate" | "cancel"
    payload: Any
    replies: queue.Queue


class AdminJobs:
    def __init__(self, max_jobs: int = 64) -> None:
        self.jobs: queue.Queue[Job] = queue.Queue(max_jobs)
        self.is_closed = False
        self._ids = itertools.count()

    def submit(self, kind: str, payload: Any) -> queue.Queue:
        """Queue a job (queue.Full when too many are waiting); returns its reply queue."""
        if self.is_closed:
            raise JobsClosed("the talker is shutting down")
        job = Job(kind, payload, queue.Queue())
        self.jobs.put_nowait(job)
        return job.replies

    def run(self, server: "TalkerServer") -> None:
        """Loop thread: run every queued job."""
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                return
            try:
                if job.kind == "stats":
                    job.replies.put(server.stats(reset=job.payload))
                elif job.kind == "generate":
                    self._generate(server, job)
                elif job.kind == "cancel":   # the gRPC caller went away: payload is its reply queue
                    for rid in [rid for rid, r in server.routes.items() if r.sink is job.payload]:
                        server.abort_request(rid, "CANCELLED", "admin caller went away")
            except Exception as exc:   # reported to the gRPC caller; the loop goes on
                logger.exception("admin %s job failed", job.kind)
                job.replies.put(exc)

    def _generate(self, server: "TalkerServer", job: Job) -> None:
        prompt, feed, sampling = job.payload
        rid = f"admin-{next(self._ids)}-{time.monotonic_ns()}"
        try:
            server.engine.add_request(rid, prompt, feed, sampling)
        except EngineError as exc:
            job.replies.put(ErrorOut(rid, exc.code, exc.message))
            return
        server.routes[rid] = Route(rid, sink=job.replies, seed=sampling.seed)

    def close(self) -> None:
        self.is_closed = True
        while True:
            try:
                self.jobs.get_nowait().replies.put(JobsClosed("the talker is shutting down"))
            except queue.Empty:
                return

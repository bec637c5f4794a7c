"""The door from gRPC handler threads into the loop thread, and admin GenerateCodes as engine requests.

The engine and the sockets belong to the loop thread. A gRPC handler puts a job (kind, payload,
reply queue) on a bounded queue and reads its answers from the reply queue; the loop takes every
waiting job each turn and hands it to the handler of its kind. A GenerateCodes job becomes an
ordinary engine request, batched with live traffic, whose route leads to that reply queue instead
of a vocoder (emit.py puts each step's frames there).
"""
from __future__ import annotations

import itertools
import queue
import time
from dataclasses import dataclass
from typing import Any

from talker_service.engine import EngineError, ErrorOut, TalkerEngine
from talker_service.server.routes import Route, RouteTable


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

    def submit(self, kind: str, payload: Any) -> queue.Queue:
        """gRPC thread: queue a job (queue.Full when too many are waiting); returns its reply queue."""
        if self.is_closed:
            raise JobsClosed("the talker is shutting down")
        job = Job(kind, payload, queue.Queue())
        self.jobs.put_nowait(job)
        return job.replies

    def take_all(self) -> list[Job]:
        """Loop thread: the jobs waiting now."""
        jobs = []
        while True:
            try:
                jobs.append(self.jobs.get_nowait())
            except queue.Empty:
                return jobs

    def close(self) -> None:
        """Loop thread, at shutdown: refuse new jobs, answer the queued ones JobsClosed."""
        self.is_closed = True
        for job in self.take_all():
            job.replies.put(JobsClosed("the talker is shutting down"))


class AdminGenerations:
    """GenerateCodes calls running as engine requests (loop thread only)."""

    def __init__(self, routes: RouteTable, engine: TalkerEngine) -> None:
        self.routes = routes
        self.engine = engine
        self._ids = itertools.count()

    def start(self, job: Job) -> None:
        """job.payload = (PromptRequest, closed TextFeed, SamplingParams)."""
        prompt, feed, sampling = job.payload
        rid = f"admin-{next(self._ids)}-{time.monotonic_ns()}"
        try:
            self.engine.add_request(rid, prompt, feed, sampling)
        except EngineError as exc:
            job.replies.put(ErrorOut(rid, exc.code, exc.message))
            return
        self.routes.add(Route(rid, sink=job.replies, seed=sampling.seed))

    def cancel(self, job: Job) -> None:
        """The gRPC caller went away: job.payload is the reply queue of its generate job."""
        for route in self.routes:
            if route.sink is job.payload:
                self.routes.abort(route.request_id, "CANCELLED", "admin caller went away")

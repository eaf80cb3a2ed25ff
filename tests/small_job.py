"""A small in-process job for the tests of one mechanism in the job: 30 users over 3 cells for 12
one-second slots, every user reporting at every slot, under one requirement for everyone or a
skewed mix (three users with a tiny budget among 27 with a large one)."""

from __future__ import annotations

import orjson

from streams.job.config import JobConfig
from streams.job.pipeline import InProcessJob

USERS = [f"u{i}" for i in range(30)]
SLOTS = 12


def requirement(i: int, skewed: bool) -> tuple[int, float]:
    """User i's (w, E): (4, 1.0) for everyone, or, skewed, (20, 0.05) for the first three and
    (2, 3.0) for the others."""
    if not skewed:
        return 4, 1.0
    return (20, 0.05) if i < 3 else (2, 3.0)


def value(i: int, t: int) -> int:
    """User i's cell at slot t."""
    return (i * 7 + t) % 3


def run(mechanism: str, noise: str, skewed: bool, nonce: str = "c0ffee",
        postprocess: str = "auto") -> InProcessJob:
    """The job over every slot, released."""
    config = JobConfig(stream="s", mechanism=mechanism, domain={"kind": "cells", "size": 3},
                       slot_ms=1000, partitions=2, secret="k", nonce=nonce,
                       event_time="history", noise=noise, postprocess=postprocess)
    job = InProcessJob(config)
    job.register([(u.encode(), orjson.dumps({"user": u, "w": requirement(i, skewed)[0],
                                              "E": requirement(i, skewed)[1]}))
                  for i, u in enumerate(USERS)])
    for t in range(SLOTS):
        job.feed([(u.encode(), orjson.dumps({"user": u, "time": t * 1000 + i,
                                             "value": value(i, t)}))
                  for i, u in enumerate(USERS)])
    job.finish(SLOTS * 1000)
    return job


def decisions(job: InProcessJob) -> list[dict]:
    """The job's decisions of its slots, in slot order."""
    docs = [orjson.loads(v) for k, v in job.coordinator.decisions.items() if k != "start"]
    return sorted((d for d in docs if "slot" in d and "published" in d), key=lambda d: d["slot"])

"""The changelog topics a worker creates before Faust starts are the ones its tables use."""

from __future__ import annotations

from pathlib import Path

from streams.job.config import JobConfig
from streams.job.worker.faust_job import Job
from streams.job.worker.preflight import changelog_specs


def test_the_changelogs_created_first_are_the_tables_changelogs(tmp_path: Path) -> None:
    cfg = JobConfig(stream="s", mechanism="pbd", domain={"kind": "cells", "size": 3},
                    partitions=6, secret="x", prefix="cl")
    job = Job(cfg, "127.0.0.1:9", tmp_path / "data")
    declared = {t.changelog_topic.get_topic_name(): t.changelog_topic.partitions
                for t in job.app.tables.values()}
    specs = changelog_specs(cfg.app_id(), cfg.partitions, 3)
    assert {s.name: s.partitions for s in specs} == declared
    assert declared["pwevent-cl-s-coordinator-changelog"] == 1
    assert declared["pwevent-cl-s-users-changelog"] == 6
    for spec in specs:
        assert spec.compacted and spec.replication == 3
        assert spec.config["min.insync.replicas"] == "2"
    assert all(s.config["min.insync.replicas"] == "1" for s in changelog_specs("a", 2, 1))

"""The class archive of Kafka's classes that ``./setup.sh test`` writes (``local_kafka.apache``,
``class_archive``): nodes and tools start with it, and an archive the JVM cannot use changes
nothing but their speed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from local_kafka.apache import ApacheKafka, class_archive, java, jvm_options, kafka_libs

UUID = re.compile(r"[A-Za-z0-9_-]{22}")  # what StorageTool random-uuid prints


def storage_uuid(options: tuple[str, ...], libs: Path) -> subprocess.CompletedProcess[str]:
    """Kafka's StorageTool asked for a cluster id, in a JVM with ``options``."""
    return subprocess.run([java(), *options, "-cp", f"{libs}/*", "kafka.tools.StorageTool",
                           "random-uuid"], capture_output=True, text=True, timeout=120)


def test_nodes_and_tools_start_with_the_archive_setup_wrote() -> None:
    libs = kafka_libs()
    archive = class_archive(libs)
    assert archive.is_file(), f"./setup.sh test wrote no class archive at {archive}"
    cluster = ApacheKafka(1)
    assert f"-XX:SharedArchiveFile={archive}" in cluster.jvm_options
    assert f"-XX:SharedArchiveFile={archive}" in cluster.tool("kafka.tools.StorageTool")
    # -Xshare:on: the JVM refuses to start unless it maps the archive
    done = storage_uuid((*cluster.jvm_options, "-Xshare:on"), libs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert UUID.fullmatch(done.stdout.strip()), done.stdout


def test_an_archive_the_jvm_cannot_use_is_passed_over_in_silence(tmp_path: Path) -> None:
    libs = tmp_path / "libs"
    libs.symlink_to(kafka_libs(), target_is_directory=True)
    class_archive(libs).write_bytes(b"not a class archive" * 100)
    options = jvm_options(libs)
    assert f"-XX:SharedArchiveFile={class_archive(libs)}" in options
    done = storage_uuid(options, libs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert UUID.fullmatch(done.stdout.strip()), done.stdout  # no warning beside the id
    assert done.stderr == ""


def test_without_an_archive_nothing_is_asked_of_the_jvm(tmp_path: Path) -> None:
    libs = tmp_path / "libs"
    libs.symlink_to(kafka_libs(), target_is_directory=True)
    assert not any("SharedArchiveFile" in option for option in jvm_options(libs))

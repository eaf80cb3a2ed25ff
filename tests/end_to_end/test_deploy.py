"""The deployment files agree with the code.

``docker-compose.yml`` and ``deploy/kubernetes/`` cannot be run in CI (no container engine), so
this module checks them statically against the code's own definitions: every ``pwevent`` command in
them is parsed by the real CLI parser, the topic prefix and partition count match
``deploy/topics.json``, which in turn must equal what ``deploy/render_topics.py`` renders from
``streams.kafka.topics.Topics`` now; all workers run with the same job settings; the randomness
secret is never written down.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import re
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from streams.cli.main import build_parser
from streams.kafka.topics import Topics

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
KUBERNETES = ROOT / "deploy" / "kubernetes"
TOPICS_JSON = ROOT / "deploy" / "topics.json"
RENDER_TOPICS = ROOT / "deploy" / "render_topics.py"
DOCKERFILE = ROOT / "Dockerfile"

BROKER = "kafka:9092"
SECRET_ENV = "PWEVENT_SECRET"
SECRET_NAME = "pwevent-secret"

#: Flags whose values every worker of one job must share (deploy/README.md).
JOB_FLAGS = (
    "--broker",
    "--prefix",
    "--partitions",
    "--stream",
    "--mechanism",
    "--cells",
    "--slot-ms",
)

#: Parsed settings that may differ between workers (everything else must be equal): where state
#: lives, and how a worker is operated (its logs, its metrics server).
PER_WORKER = frozenset({"data_dir", "loglevel", "log_format", "metrics_port", "metrics_host"})

#: Parsed settings the other commands (topic creation, replay) must share with the workers when
#: they have them: the topic layout, and how event times are cut into slots.
SHARED_WITH_WORKERS = ("broker", "prefix", "partitions", "slot_ms", "origin_ms")

_WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet")


# -- loading ---------------------------------------------------------------------------------------


def load_render_topics() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_topics", RENDER_TOPICS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def kubernetes_files() -> list[Path]:
    return sorted(p for p in KUBERNETES.rglob("*") if p.suffix in (".yaml", ".yml"))


def load_kubernetes() -> list[tuple[Path, dict[str, Any]]]:
    docs = []
    for path in kubernetes_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.append((path, doc))
    return docs


def deployed_layout() -> dict[str, Any]:
    return json.loads(TOPICS_JSON.read_text())


def is_pwevent_image(image: str) -> bool:
    return image.rsplit("/", 1)[-1].split(":", 1)[0] == "pwevent"


def is_kafka(image: str) -> bool:
    return image.split(":", 1)[0] == "apache/kafka"


def pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    kind = doc.get("kind")
    if kind in _WORKLOAD_KINDS:
        return doc["spec"]["template"]["spec"]
    if kind == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return None


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return list(spec.get("initContainers", [])) + list(spec.get("containers", []))


# -- pwevent invocations ---------------------------------------------------------------------------


@dataclass
class Invocation:
    """One ``pwevent`` command line of the deployment files, with where it comes from."""

    where: str
    argv: list[str]
    env: dict[str, Any] = field(default_factory=dict)
    compose_service: dict[str, Any] | None = None
    kubernetes: tuple[dict[str, Any], dict[str, Any]] | None = None  # (workload, container)

    @property
    def command(self) -> tuple[str, ...]:
        """The leading sub-command words (``("topics", "create")``)."""
        words = []
        for token in self.argv:
            if token.startswith("-"):
                break
            words.append(token)
        return tuple(words)

    @property
    def flags(self) -> dict[str, str]:
        """``{"--flag": value}``; ``""`` for a flag without a value."""
        out: dict[str, str] = {}
        tokens = self.argv[len(self.command):]
        i = 0
        while i < len(tokens):
            token = tokens[i]
            assert token.startswith("--"), f"{self.where}: unexpected argument {token!r}"
            if "=" in token:
                name, value = token.split("=", 1)
            elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                name, value = token, tokens[i + 1]
                i += 1
            else:
                name, value = token, ""
            assert name not in out, f"{self.where}: {name} given twice"
            out[name] = value
            i += 1
        return out


def compose_invocations() -> list[Invocation]:
    out = []
    for name, service in load_compose()["services"].items():
        if not ("build" in service or is_pwevent_image(service.get("image", ""))):
            continue
        assert "entrypoint" not in service, f"compose {name}: keep the image's pwevent entrypoint"
        command = service.get("command")
        assert isinstance(command, list), f"compose {name}: write the command as a list"
        env = service.get("environment") or {}
        if isinstance(env, list):
            env = dict(item.split("=", 1) for item in env)
        out.append(
            Invocation(f"compose:{name}", [str(a) for a in command], env, compose_service=service)
        )
    return out


def kubernetes_invocations() -> list[Invocation]:
    out = []
    for path, doc in load_kubernetes():
        spec = pod_spec(doc)
        if spec is None:
            continue
        for container in containers(spec):
            if not is_pwevent_image(container["image"]):
                continue
            where = f"{path.relative_to(ROOT)}:{doc['metadata']['name']}/{container['name']}"
            assert "command" not in container, f"{where}: keep the image's pwevent entrypoint"
            env = {e["name"]: e for e in container.get("env", [])}
            argv = [str(a) for a in container.get("args", [])]
            out.append(Invocation(where, argv, env, kubernetes=(doc, container)))
    return out


def all_invocations() -> list[Invocation]:
    return compose_invocations() + kubernetes_invocations()


def workers(invocations: list[Invocation]) -> list[Invocation]:
    return [inv for inv in invocations if inv.command == ("worker",)]


# -- the CLI parser --------------------------------------------------------------------------------


def subparsers_action(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def resolve(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> argparse.ArgumentParser:
    """The parser that handles the flags after the sub-command words.

    Words are followed through nested sub-parsers; words left once a parser has no sub-parsers
    are its positional arguments (``topics create``), which ``parse_args`` validates.
    ``KeyError`` names an unknown sub-command.
    """
    current = parser
    for word in words:
        action = subparsers_action(current)
        if action is None:
            break
        if word not in action.choices:
            raise KeyError(word)
        current = action.choices[word]
    return current


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


# -- tests: topics ---------------------------------------------------------------------------------


def test_topics_json_is_what_render_topics_produces_now() -> None:
    render_topics = load_render_topics()
    assert TOPICS_JSON.read_text() == render_topics.render(), (
        "deploy/topics.json is out of date: run python deploy/render_topics.py"
    )
    assert render_topics.main(["--check"]) == 0


def test_topics_json_lists_the_codes_topics() -> None:
    layout = deployed_layout()
    topics = Topics(prefix=layout["prefix"], partitions=layout["partitions"])
    assert [
        (t["name"], t["partitions"], t["replication"], t["config"]) for t in layout["topics"]
    ] == [(s.name, s.partitions, s.replication, dict(s.config)) for s in topics.specs()]


def test_every_command_uses_the_deployed_prefix_partitions_and_broker() -> None:
    layout = deployed_layout()
    invocations = all_invocations()
    assert invocations
    for inv in invocations:
        flags = inv.flags
        assert flags.get("--prefix") == layout["prefix"], inv.where
        assert flags.get("--partitions", "").isdigit(), inv.where
        assert int(flags["--partitions"]) == layout["partitions"], inv.where
        assert flags.get("--broker") == BROKER, inv.where


def test_topics_are_created_once_in_each_deployment() -> None:
    for source in (compose_invocations(), kubernetes_invocations()):
        creators = [inv for inv in source if inv.command == ("topics", "create")]
        assert len(creators) == 1, [inv.where for inv in source]


def test_topic_names_in_the_files_are_the_codes() -> None:
    layout = deployed_layout()
    names = [s.name for s in Topics(layout["prefix"], layout["partitions"]).specs()]
    pattern = re.compile(rf"(?<![\w.-]){re.escape(layout['prefix'])}\.[\w.-]*\w")

    def strings(node: Any) -> Iterator[str]:
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for key, value in node.items():
                yield from strings(key)
                yield from strings(value)
        elif isinstance(node, list):
            for item in node:
                yield from strings(item)

    documents = [load_compose()] + [doc for _path, doc in load_kubernetes()]
    for text in (s for doc in documents for s in strings(doc)):
        for match in pattern.findall(text):
            assert match in names, f"unknown topic {match!r} in {text!r}"

    # Kubernetes workers wait for every topic before they start.
    waits = 0
    for _path, doc in load_kubernetes():
        spec = pod_spec(doc)
        if spec is None:
            continue
        for container in spec.get("initContainers", []):
            env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
            if "TOPICS" in env:
                assert env["TOPICS"].split() == names, container["name"]
                waits += 1
    assert waits >= 1


def test_topic_replication_fits_the_broker_count() -> None:
    replication = max(t["replication"] for t in deployed_layout()["topics"])
    kafka = [s for s in load_compose()["services"].values() if is_kafka(s.get("image", ""))]
    assert replication <= len(kafka)
    replicas = sum(
        doc["spec"].get("replicas", 1)
        for _path, doc in load_kubernetes()
        if doc["kind"] == "StatefulSet" and any(is_kafka(c["image"]) for c in containers(
            doc["spec"]["template"]["spec"]))
    )
    assert replication <= replicas


# -- tests: the CLI --------------------------------------------------------------------------------


def parse(inv: Invocation) -> argparse.Namespace:
    """Parse an invocation with the real CLI parser; ``AssertionError`` with argparse's message."""
    parser = build_parser()
    assert inv.command, f"{inv.where}: no sub-command"
    try:
        leaf = resolve(parser, inv.command)
    except KeyError as missing:
        raise AssertionError(f"{inv.where}: pwevent has no sub-command {missing}") from None
    # Exact option names: argparse would also accept unambiguous abbreviations.
    unknown = sorted(set(inv.flags) - option_strings(leaf))
    assert not unknown, f"{inv.where}: `pwevent {' '.join(inv.command)}` has no {unknown}"
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return parser.parse_args(inv.argv)
    except SystemExit:
        raise AssertionError(f"{inv.where}: {stderr.getvalue().strip()}") from None


@pytest.mark.parametrize("inv", all_invocations(), ids=lambda inv: inv.where)
def test_the_cli_accepts_every_command(inv: Invocation) -> None:
    args = parse(inv)
    assert args.command == inv.command[0]


# -- tests: workers --------------------------------------------------------------------------------


def test_all_workers_run_the_same_job() -> None:
    found = workers(all_invocations())
    assert len([w for w in found if w.compose_service is not None]) >= 2
    assert any(w.kubernetes is not None for w in found)
    # The job flags are spelled out on every worker, never left to a default...
    reference = {flag: found[0].flags.get(flag) for flag in JOB_FLAGS}
    assert None not in reference.values(), f"{found[0].where} lacks one of {JOB_FLAGS}"
    for worker in found[1:]:
        assert {flag: worker.flags.get(flag) for flag in JOB_FLAGS} == reference, worker.where
    # ...and, as the CLI reads them, every setting but the per-worker ones is the same.
    settings = [
        (w.where, {k: v for k, v in vars(parse(w)).items() if k not in PER_WORKER}) for w in found
    ]
    for where, setting in settings[1:]:
        assert setting == settings[0][1], f"{where} differs from {settings[0][0]}"


def test_topic_creation_and_replay_agree_with_the_workers() -> None:
    invocations = all_invocations()
    worker = vars(parse(workers(invocations)[0]))
    for inv in invocations:
        if inv.command == ("worker",):
            continue
        args = vars(parse(inv))
        for key in SHARED_WITH_WORKERS:
            if key in args:
                assert args[key] == worker[key], f"{inv.where}: {key}"


def test_there_are_no_more_workers_than_partitions() -> None:
    partitions = deployed_layout()["partitions"]
    found = workers(all_invocations())
    assert len([w for w in found if w.compose_service is not None]) <= partitions
    for worker in found:
        if worker.kubernetes is not None:
            workload, _container = worker.kubernetes
            assert workload["kind"] == "StatefulSet", worker.where
            assert 1 <= workload["spec"].get("replicas", 1) <= partitions, worker.where


def test_every_worker_keeps_its_state_on_its_own_volume() -> None:
    compose = load_compose()
    named_volumes = set(compose.get("volumes") or {})
    seen: set[str] = set()
    for worker in workers(all_invocations()):
        data_dir = worker.flags.get("--data-dir")
        assert data_dir, worker.where
        if worker.compose_service is not None:
            mounts = {}
            for volume_spec in worker.compose_service.get("volumes", []):
                source, target = volume_spec.split(":")[:2]
                mounts[target] = source
            assert data_dir in mounts, worker.where
            volume = mounts[data_dir]
            assert volume in named_volumes, worker.where
            assert volume not in seen, f"{worker.where} shares the volume {volume!r}"
            seen.add(volume)
        else:
            assert worker.kubernetes is not None
            workload, container = worker.kubernetes
            claims = {t["metadata"]["name"] for t in workload["spec"]["volumeClaimTemplates"]}
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            assert mounts.get(data_dir) in claims, worker.where


def test_compose_workers_start_after_the_topics_exist() -> None:
    services = load_compose()["services"]
    creators = [
        name for name, service in services.items()
        if service.get("command", [])[:2] == ["topics", "create"]
    ]
    assert len(creators) == 1
    topics = creators[0]
    assert services[topics].get("restart") == "no"
    kafka = [name for name, s in services.items() if is_kafka(s.get("image", ""))]
    assert services[topics]["depends_on"][kafka[0]]["condition"] == "service_healthy"
    for worker in workers(compose_invocations()):
        assert worker.compose_service is not None
        depends = worker.compose_service["depends_on"]
        assert depends[topics]["condition"] == "service_completed_successfully", worker.where


# -- tests: operating the workers -------------------------------------------------------------


def worker_workloads() -> list[tuple[dict[str, Any], dict[str, Any], int]]:
    """Each Kubernetes worker: its workload, its container, its metrics port."""
    out = []
    for worker in workers(kubernetes_invocations()):
        assert worker.kubernetes is not None
        workload, container = worker.kubernetes
        out.append((workload, container, parse(worker).metrics_port))
    return out


def test_compose_workers_serve_metrics_and_are_health_checked() -> None:
    published: set[str] = set()
    for worker in workers(compose_invocations()):
        service = worker.compose_service
        assert service is not None
        port = parse(worker).metrics_port
        assert port > 0, worker.where
        assert str(port) in [str(p) for p in service.get("expose", [])], worker.where
        targets = [str(p).rsplit(":", 1) for p in service.get("ports", [])]
        hosts = [p[0] for p in targets if p[-1] == str(port)]
        assert len(hosts) == 1, f"{worker.where}: publish the metrics port once"
        assert hosts[0] not in published, f"{worker.where}: host port {hosts[0]} taken twice"
        published.add(hosts[0])
        # compose has one health state, which gates the services depending on a worker:
        # readiness (a partition held, the broker answering)
        check = " ".join(str(t) for t in service["healthcheck"]["test"])
        assert f"127.0.0.1:{port}/readyz" in check, worker.where
        # Prometheus' Docker service discovery reads the labels the pods carry as annotations
        labels = service.get("labels") or {}
        if isinstance(labels, list):
            labels = dict(item.split("=", 1) for item in labels)
        assert labels.get("prometheus.io/scrape") == "true", worker.where
        assert labels.get("prometheus.io/port") == str(port), worker.where
        assert labels.get("prometheus.io/path") == "/metrics", worker.where


def test_compose_services_that_need_the_workers_wait_until_they_are_ready() -> None:
    services = load_compose()["services"]
    names = {w.where.split(":", 1)[1] for w in workers(compose_invocations())}
    assert names
    dependents = {name: service["depends_on"] for name, service in services.items()
                  if names & set(service.get("depends_on") or {})}
    assert dependents, "no service waits for the workers"
    for name, depends in dependents.items():
        for worker in names & set(depends):
            assert depends[worker]["condition"] == "service_healthy", (name, worker)


def http_probe(container: dict[str, Any], kind: str) -> tuple[str, int | None]:
    """Path and port number of a container's HTTP probe (a named port resolved)."""
    get = container[kind]["httpGet"]
    port = get["port"]
    if isinstance(port, str):
        port = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}.get(port)
    return get["path"], port


def test_kubernetes_workers_are_probed_and_scraped() -> None:
    found = worker_workloads()
    assert found
    for workload, container, port in found:
        where = f"{workload['kind']}/{workload['metadata']['name']}"
        assert port > 0, where
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        assert port in ports.values(), f"{where}: no containerPort {port}"
        assert http_probe(container, "livenessProbe") == ("/healthz", port), where
        assert http_probe(container, "readinessProbe") == ("/readyz", port), where
        if "startupProbe" in container:
            assert http_probe(container, "startupProbe") == ("/healthz", port), where
        annotations = workload["spec"]["template"]["metadata"].get("annotations", {})
        assert annotations.get("prometheus.io/scrape") == "true", where
        assert annotations.get("prometheus.io/port") == str(port), where
        assert annotations.get("prometheus.io/path") == "/metrics", where


def test_a_disruption_budget_covers_exactly_the_workers() -> None:
    budgets = [(path, doc) for path, doc in load_kubernetes()
               if doc["kind"] == "PodDisruptionBudget"]
    assert len(budgets) == 1, budgets
    path, pdb = budgets[0]
    assert pdb["apiVersion"] == "policy/v1", path
    assert pdb["spec"].get("maxUnavailable") == 1, path
    assert "minAvailable" not in pdb["spec"], path
    selector = pdb["spec"]["selector"]["matchLabels"]
    assert selector, path

    def name(doc: dict[str, Any]) -> tuple[str, str]:
        return doc["kind"], doc["metadata"]["name"]

    worker_names = {name(workload) for workload, _container, _port in worker_workloads()}
    selected = set()
    for _path, doc in load_kubernetes():
        if pod_spec(doc) is None or doc["kind"] == "CronJob":
            continue
        labels = doc["spec"]["template"]["metadata"].get("labels", {})
        if all(labels.get(k) == v for k, v in selector.items()):
            selected.add(name(doc))
    assert selected == worker_names, (path, selected)


def test_only_prometheus_reaches_the_workers_metrics() -> None:
    """The metrics hold exact counts: a NetworkPolicy admits nothing but the monitoring
    namespace's Prometheus, and only on the metrics port the workers serve."""
    policies = [(path, doc) for path, doc in load_kubernetes() if doc["kind"] == "NetworkPolicy"]
    assert len(policies) == 1, policies
    path, policy = policies[0]
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"], path
    assert spec["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "pwevent-worker"}
    ports = {port for _workload, _container, port in worker_workloads()}
    (rule,) = spec["ingress"]
    assert {p["port"] for p in rule["ports"]} == ports, (path, ports)
    (peer,) = rule["from"]
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    assert "namespaceSelector" in peer, path


# -- tests: the secret -----------------------------------------------------------------------------


def test_the_secret_is_never_written_down() -> None:
    for inv in all_invocations():
        assert "--secret" not in inv.flags, inv.where
    for worker in workers(all_invocations()):
        assert SECRET_ENV in worker.env, worker.where
        value = worker.env[SECRET_ENV]
        if worker.compose_service is not None:
            # Required interpolation from the operator's environment: compose refuses to start
            # without it.
            assert re.fullmatch(rf"\$\{{{SECRET_ENV}:\?[^}}]*\}}", value), worker.where
        else:
            assert "value" not in value, worker.where
            assert value["valueFrom"]["secretKeyRef"]["name"] == SECRET_NAME, worker.where
    # No Secret object with data, and no literal secret anywhere in the manifests.
    for path, doc in load_kubernetes():
        assert doc["kind"] != "Secret", path
        spec = pod_spec(doc)
        for container in containers(spec) if spec else []:
            for env in container.get("env", []):
                if "SECRET" in env["name"].upper():
                    assert "value" not in env, f"{path}: {env['name']}"
    for name, service in load_compose()["services"].items():
        env = service.get("environment") or {}
        for key, value in (env.items() if isinstance(env, dict) else []):
            if "SECRET" in key.upper():
                assert str(value).startswith("${"), f"compose {name}: {key}"


# -- tests: Kafka, image, namespace ----------------------------------------------------------------


def kafka_envs() -> list[tuple[str, dict[str, str]]]:
    out = []
    for name, service in load_compose()["services"].items():
        if is_kafka(service.get("image", "")):
            out.append((f"compose:{name}", {k: str(v) for k, v in service["environment"].items()}))
    for path, doc in load_kubernetes():
        spec = pod_spec(doc)
        for container in spec.get("containers", []) if spec else []:
            if is_kafka(container["image"]):
                env = {e["name"]: str(e.get("value", "")) for e in container.get("env", [])}
                out.append((f"{path.relative_to(ROOT)}:{container['name']}", env))
    return out


def test_kafka_runs_in_kraft_mode_and_is_reachable_as_the_broker() -> None:
    envs = kafka_envs()
    assert len(envs) == 2
    for where, env in envs:
        assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}, where
        assert env.get("CLUSTER_ID"), where
        assert not any("ZOOKEEPER" in key for key in env), where
        advertised = [a.split("://", 1)[1] for a in env["KAFKA_ADVERTISED_LISTENERS"].split(",")]
        assert BROKER in advertised, where
        assert env.get("KAFKA_AUTO_CREATE_TOPICS_ENABLE") == "false", where


def test_one_pwevent_image_everywhere_matching_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "pwevent" in project["scripts"]
    images = {service["image"] for service in load_compose()["services"].values()
              if "build" in service}
    images |= {inv.kubernetes[1]["image"] for inv in kubernetes_invocations() if inv.kubernetes}
    # One image (any registry), tagged with the package version.
    assert len(images) == 1, images
    assert images.pop().rsplit(":", 1)[-1] == project["version"]
    dockerfile = DOCKERFILE.read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", dockerfile, re.M)
    assert re.search(r'^ENTRYPOINT \["pwevent"\]', dockerfile, re.M)


def test_kubernetes_objects_share_one_namespace() -> None:
    docs = load_kubernetes()
    namespaces = [doc["metadata"]["name"] for _path, doc in docs if doc["kind"] == "Namespace"]
    assert len(namespaces) == 1
    for path, doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == namespaces[0], path


def test_the_image_takes_extras_by_a_build_argument() -> None:
    """``--build-arg EXTRAS=avro`` installs ``pwevent[avro]`` in both stages; without it, the
    plain package. The shell expansion the RUN lines use is run here as /bin/sh runs it."""
    dockerfile = DOCKERFILE.read_text()
    assert dockerfile.count('ARG EXTRAS=""') == 2  # one per stage: a build arg is per stage
    wheel = re.search(r'^RUN pip wheel .*? ("\.\$\{EXTRAS:\+\[\$EXTRAS\]\}")$', dockerfile, re.M)
    install = re.search(r'pip install --no-index --find-links /wheels ("pwevent[^"]*")',
                        dockerfile)
    assert wheel and install, "the RUN lines that build and install pwevent changed"
    for extras, want in (("", (".", "pwevent")), ("avro", (".[avro]", "pwevent[avro]")),
                         ("avro,eval", (".[avro,eval]", "pwevent[avro,eval]"))):
        got = subprocess.run(["sh", "-c", f"printf '%s\\n' {wheel.group(1)} {install.group(1)}"],
                             env={"EXTRAS": extras}, capture_output=True, text=True, check=True)
        assert tuple(got.stdout.split()) == want

"""compose/: the docker-compose file agrees with the CLI (subcommands, flags, environment) and the image.

No Docker here: the file is parsed with PyYAML and every ``sniper`` command line in it is checked
against the typer app (the subcommand exists, ``--help`` works, every flag is one of its options);
the image's files are what the Dockerfile's COPY lines select from the build context less
``.dockerignore``, and a wheel built from exactly those files holds every package of the project;
the demo trace is what ``sniper scenario demo`` writes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

import typer
import yaml
from typer.testing import CliRunner

from sniper.cli import app
from sniper.transport.kafka import ENV_PREFIX, KafkaSettings

COMPOSE = Path(__file__).resolve().parent.parent / "compose"
ROOT = COMPOSE.parent


def compose() -> dict[str, Any]:
    data = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def sniper_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in compose()["services"].items() if s.get("image", "").startswith("sniper")}


def test_services_and_images() -> None:
    services = compose()["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert "broker,controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft, no ZooKeeper
    cores = [s for s in sniper_services().values() if s["command"][0] == "core"]
    feeds = [s for s in sniper_services().values() if s["command"][0] == "feed"]
    assert 2 <= len(cores) <= 3 and len(feeds) == 1
    built = [s for s in sniper_services().values() if "build" in s]
    assert len(built) == 1
    dockerfile = COMPOSE.parent / built[0]["build"]["dockerfile"]
    assert dockerfile.is_file()
    text = dockerfile.read_text()
    assert 'ENTRYPOINT ["sniper"]' in text
    for line in text.splitlines():  # everything the image copies exists
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (COMPOSE.parent / source).exists(), source
    groups = {s["command"][s["command"].index("--group") + 1] for s in cores}
    assert len(groups) == 1  # one consumer group: Kafka spreads the partitions over the cores


def _options(command: Any) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def test_commands_and_flags_exist_in_the_cli() -> None:
    group: Any = typer.main.get_command(app)
    runner = CliRunner()
    for name, service in sniper_services().items():
        argv = service["command"]
        sub = group.commands.get(argv[0])
        assert sub is not None, f"{name}: no `sniper {argv[0]}` command"
        result = runner.invoke(app, [argv[0], "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        known = _options(sub)
        for arg in argv[1:]:
            if arg.startswith("--"):
                assert arg.split("=")[0] in known, f"{name}: `sniper {argv[0]}` has no option {arg}"
                assert arg in result.output, f"{name}: {arg} missing from `sniper {argv[0]} --help`"
        for arg in argv[1:]:  # files the command reads are in the image
            if arg.startswith("/app/"):
                assert (COMPOSE.parent / arg.removeprefix("/app/")).is_file(), arg


def test_environment_is_what_the_settings_read() -> None:
    for name, service in sniper_services().items():
        env = {k: str(v) for k, v in service["environment"].items()}
        assert all(k.startswith(ENV_PREFIX) for k in env), name
        settings = KafkaSettings.from_env(env)
        assert settings.bootstrap == "kafka:9092"
        assert settings.partitions == int(env[ENV_PREFIX + "PARTITIONS"])
        assert settings.max_message_bytes == int(env[ENV_PREFIX + "MAX_MESSAGE_BYTES"])


def test_the_bundled_trace_is_a_valid_feed() -> None:
    from sniper.messages.codec import read_trace
    from sniper.messages.feed import PartitionConfigEvent

    events, bad = read_trace(COMPOSE / "demo.jsonl")
    assert not bad and len(events) > 100
    assert isinstance(events[0], PartitionConfigEvent)


def test_only_the_metrics_ports_are_published_and_on_loopback() -> None:
    services = compose()["services"]
    assert "ports" not in services["kafka"]  # Kafka stays inside the compose network
    published = {name: s["ports"] for name, s in services.items() if "ports" in s}
    cores = {name for name, s in sniper_services().items() if s["command"][0] == "core"}
    assert set(published) == cores
    for name, ports in published.items():
        command = services[name]["command"]
        inside = command[command.index("--metrics-port") + 1]
        assert len(ports) == 1 and ports[0].startswith("127.0.0.1:") and ports[0].endswith(f":{inside}"), name


def test_only_one_core_has_a_fixed_host_port_so_the_others_scale() -> None:
    """``docker compose up --scale core-2=2``: two containers of one service cannot share a host port, so
    every core service but the first publishes its metrics port on a port Docker picks."""
    services = compose()["services"]
    cores = [name for name, s in sniper_services().items() if s["command"][0] == "core"]
    fixed = [name for name in cores if services[name]["ports"][0].split(":")[1] != ""]
    assert fixed == ["core-1"]
    assert "--scale core-2=2" in (COMPOSE / "docker-compose.yml").read_text()
    for name in cores:
        assert "container_name" not in services[name] and "hostname" not in services[name], name


def test_the_demo_is_what_sniper_scenario_demo_writes_with_preemption_on(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["scenario", "demo", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for name in ("demo.jsonl", "demo.yaml"):
        assert (COMPOSE / name).read_text() == (tmp_path / name).read_text(), f"compose/{name} is stale"
    demo = yaml.safe_load((COMPOSE / "demo.yaml").read_text())
    assert demo["partitions"][0]["preemption"]["policy"] == "sniper"


# --- the image's files: the Dockerfile's COPY lines over the context, less .dockerignore ----------------


def _ignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """``.dockerignore`` as Docker reads it: one pattern a line (``**`` any depth, ``*`` and ``?`` within
    a path element), ``!`` re-includes, the last matching line wins, a directory's match covers its files."""
    rules: list[tuple[bool, re.Pattern[str]]] = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        pattern = line.removeprefix("!").strip().strip("/")
        parts = []
        for part in pattern.split("/"):
            if part == "**":
                parts.append("(?:[^/]+/)*")
                continue
            element = "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in part)
            parts.append(element + "/")
        rules.append((keep, re.compile("".join(parts).removesuffix("/") + "$")))
    return rules


def _ignored(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for keep, rule in rules:
        if any(rule.match(prefix) for prefix in prefixes):
            ignored = not keep
    return ignored


def _image_files(dest: Path) -> list[str]:
    """Copy into ``dest`` what the Dockerfile's COPY lines put under its WORKDIR; the files copied."""
    rules = _ignore_rules()
    prune = not any(keep for keep, _ in rules)  # without a re-include, an ignored folder's files all are
    context: list[str] = []
    for folder, subfolders, files in os.walk(ROOT):
        at = Path(folder).relative_to(ROOT).as_posix().removeprefix(".")
        inside = [f"{at}/{name}".lstrip("/") for name in files]
        context += [path for path in inside if not _ignored(path, rules)]
        if prune:
            subfolders[:] = [d for d in subfolders if not _ignored(f"{at}/{d}".lstrip("/"), rules)]
    context.sort()
    copied: list[str] = []
    for line in (COMPOSE / "Dockerfile").read_text().splitlines():
        if not line.startswith("COPY "):
            continue
        args = [a for a in line.split()[1:] if not a.startswith("--")]
        *sources, target = args
        for source in sources:
            source = source.strip("/").removeprefix("./") if source not in (".", "./") else ""
            for path in context:
                if source and path != source and not path.startswith(source + "/"):
                    continue
                inside = path[len(source) :].lstrip("/") if source and path != source else path
                if source == path:
                    inside = PurePosixPath(path).name if target.endswith("/") else ""
                out = (PurePosixPath(target) / inside).as_posix().removeprefix("./").lstrip("/") or target
                (dest / out).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(ROOT / path, dest / out)
                copied.append(out)
    return copied


def _packages() -> set[str]:
    """Every import package of the project: the folders with an ``__init__.py`` that pyproject names."""
    include = re.search(r"include = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.S)
    assert include is not None
    tops = {name.strip().strip('"').rstrip("*") for name in include.group(1).split(",") if name.strip()}
    return {
        p.parent.relative_to(ROOT).as_posix()
        for p in ROOT.rglob("__init__.py")
        if p.relative_to(ROOT).parts[0] in tops and ".venv" not in p.parts
    }


def test_every_top_level_package_folder_is_one_pyproject_installs() -> None:
    folders = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert folders == {p.split("/")[0] for p in _packages()}


def test_the_image_installs_every_package_from_what_the_dockerfile_copies(tmp_path: Path) -> None:
    """``pip install .`` inside the image sees only the copied files: a wheel built from them holds every
    package and module of the project, its licence and the demo the feed service replays."""
    app_dir = tmp_path / "app"
    copied = _image_files(app_dir)
    assert "compose/demo.jsonl" in copied and "pyproject.toml" in copied
    assert not any(c.startswith(("tests/", ".venv", ".git/")) or "__pycache__" in c for c in copied)
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), "."],
        cwd=app_dir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = wheels.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in sorted(_packages()):
        modules = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / package).glob("*.py"))
        missing = [m for m in modules if m not in names]
        assert not missing, f"the image would install without {missing}"
    assert any(n.endswith("licenses/LICENSE") for n in names)

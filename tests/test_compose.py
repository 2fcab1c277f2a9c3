"""compose/: the docker-compose file agrees with the CLI (subcommands, flags, environment) and the image.

No Docker here: the file is parsed with PyYAML and every ``sniper`` command line in it is checked
against the typer app (the subcommand exists, ``--help`` works, every flag is one of its options).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
import yaml
from typer.testing import CliRunner

from sniper.cli import app
from transport.kafka import ENV_PREFIX, KafkaSettings

COMPOSE = Path(__file__).resolve().parent.parent / "compose"


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
    from messages.codec import read_trace
    from messages.feed import PartitionConfigEvent

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

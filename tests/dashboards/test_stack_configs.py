"""The stack's config files parse, name only files that exist, and agree with one another:
compose services and ports, collector endpoints, datasource URLs, provisioning paths."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

import pytest
import yaml

from fdprof import dashboards

DIR = Path(__file__).resolve().parents[2] / "dashboards"


def load(relative: str) -> dict:
    return yaml.safe_load((DIR / relative).read_text())


COMPOSE = load("compose.yaml")
COLLECTOR = load("otel-collector.yaml")
TEMPO = load("tempo.yaml")
PROMETHEUS = load("prometheus.yaml")
DATASOURCES = {d["type"]: d for d in load("provisioning/datasources/fdprof.yaml")["datasources"]}
PROVIDERS = load("provisioning/dashboards/fdprof.yaml")["providers"]
SERVICES = COMPOSE["services"]


def mounts(service: str) -> dict[PurePosixPath, Path]:
    """Container path → host path of a service's bind mounts."""
    out = {}
    for volume in SERVICES[service]["volumes"]:
        host, container = volume.split(":")[:2]
        out[PurePosixPath(container)] = (DIR / host).resolve()
    return out


def container_file(service: str, path: str) -> Path | None:
    """The host file a container path of ``service`` maps to (through a mount or below one)."""
    target = PurePosixPath(path)
    for container, host in mounts(service).items():
        if target == container:
            return host
        if container in target.parents:
            return host / target.relative_to(container)
    return None


def published(service: str) -> dict[int, int]:
    """Container port → host port."""
    out = {}
    for spec in SERVICES[service].get("ports", []):
        host, container = str(spec).split(":")[-2:]
        out[int(container)] = int(host)
    return out


def host_port(endpoint: str) -> tuple[str, int]:
    parsed = urlparse(endpoint if "//" in endpoint else f"//{endpoint}")
    return parsed.hostname or "", parsed.port


def test_every_config_file_parses():
    files = [p for p in DIR.rglob("*") if p.suffix in (".yaml", ".yml", ".json")]
    assert len(files) >= 8
    for path in files:
        text = path.read_text()
        assert json.loads(text) if path.suffix == ".json" else yaml.safe_load(text), path


def test_compose_mounts_name_existing_files():
    for service in SERVICES:
        for host in mounts(service).values():
            assert host.exists(), f"{service} mounts missing {host}"


def test_compose_commands_name_mounted_files():
    for service, flag in [
        ("otel-collector", "--config="),
        ("tempo", "-config.file="),
        ("prometheus", "--config.file="),
    ]:
        args = [a for a in SERVICES[service]["command"] if a.startswith(flag)]
        assert len(args) == 1, service
        host = container_file(service, args[0].removeprefix(flag))
        assert host is not None and host.is_file(), f"{service}: {args[0]} is not mounted"


def test_prometheus_config_passes_promtool():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail(
            "promtool is not installed (apt-get install prometheus; "
            "make test does as root: .ci/system-deps)"
        )
    result = subprocess.run(
        [promtool, "check", "config", str(DIR / "prometheus.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_collector_pipelines_name_defined_components():
    service = COLLECTOR["service"]
    for extension in service["extensions"]:
        assert extension in COLLECTOR["extensions"]
    used_as = {"receivers": set(), "exporters": set()}
    for name, pipeline in service["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                defined = COLLECTOR.get(kind, {}) | COLLECTOR.get("connectors", {})
                assert component in defined, f"pipeline {name}: {kind} {component} undefined"
                if kind in used_as:
                    used_as[kind].add(component)
    for connector in COLLECTOR.get("connectors", {}):
        assert connector in used_as["exporters"] and connector in used_as["receivers"]
    assert {"traces", "metrics"} <= set(service["pipelines"])


def test_collector_otlp_ports_are_published():
    ports = published("otel-collector")
    for protocol in ("grpc", "http"):
        endpoint = COLLECTOR["receivers"]["otlp"]["protocols"][protocol]["endpoint"]
        _, port = host_port(endpoint)
        assert port in ports, f"OTLP/{protocol} port {port} is not published"
    assert ports[4318] == 4318, "docs point --otlp-endpoint at http://localhost:4318"
    assert "http://localhost:4318" in (DIR / "compose.yaml").read_text()


def test_collector_sends_traces_to_tempo_otlp_receiver():
    host, port = host_port(COLLECTOR["exporters"]["otlp/tempo"]["endpoint"])
    assert host in SERVICES
    image = SERVICES[host]["image"]
    assert image.startswith("grafana/tempo:")
    tempo_grpc = TEMPO["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert host_port(tempo_grpc)[1] == port


def test_prometheus_scrapes_the_collector_exporter():
    _, exporter_port = host_port(COLLECTOR["exporters"]["prometheus"]["endpoint"])
    targets = [
        t
        for job in PROMETHEUS["scrape_configs"]
        for sc in job["static_configs"]
        for t in sc["targets"]
    ]
    assert (f"otel-collector:{exporter_port}") in targets
    assert "otel-collector" in SERVICES


def test_datasources_point_at_compose_services():
    prom = DATASOURCES["prometheus"]
    host, port = host_port(prom["url"])
    assert host == "prometheus" and port in published("prometheus")
    assert f"--web.listen-address=:{port}" in SERVICES["prometheus"]["command"]
    assert "--enable-feature=exemplar-storage" in SERVICES["prometheus"]["command"]
    tempo = DATASOURCES["tempo"]
    host, port = host_port(tempo["url"])
    assert host == "tempo" and port == TEMPO["server"]["http_listen_port"]
    assert port in published("tempo")


def test_datasource_uids_are_fixed_and_exemplars_link_to_tempo():
    uids = {d["uid"] for d in DATASOURCES.values()}
    assert uids == {"fdprof-prometheus", "fdprof-tempo"}
    links = DATASOURCES["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert [link["datasourceUid"] for link in links] == [DATASOURCES["tempo"]["uid"]]


def test_provisioning_is_mounted_and_loads_every_dashboard():
    assert container_file("grafana", "/etc/grafana/provisioning") == (DIR / "provisioning")
    (provider,) = PROVIDERS
    assert provider["type"] == "file"
    for name in dashboards.BUILDERS:
        host = container_file("grafana", f"{provider['options']['path']}/{name}")
        assert host == DIR / name, f"{name} is not mounted under the provider's path"
    home = SERVICES["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert container_file("grafana", home).is_file()


def test_every_port_is_published_on_loopback_only():
    for service in SERVICES.values():
        for spec in service.get("ports", []):
            assert str(spec).startswith("127.0.0.1:"), spec


def test_grafana_has_no_anonymous_admin():
    grafana = SERVICES["grafana"]["environment"]
    anonymous = str(grafana.get("GF_AUTH_ANONYMOUS_ENABLED", "false")).lower() == "true"
    if anonymous:
        assert grafana.get("GF_AUTH_ANONYMOUS_ORG_ROLE", "Viewer") == "Viewer"
    assert str(grafana.get("GF_AUTH_DISABLE_LOGIN_FORM", "false")).lower() != "true"
    password = grafana["GF_SECURITY_ADMIN_PASSWORD"]
    assert password.startswith("${") and ":?" in password  # from the environment, required

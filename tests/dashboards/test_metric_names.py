"""Both metric paths yield the names the dashboards query: the scrape endpoint uses
``prom_name`` directly, the OTLP path goes through the Collector's Prometheus exporter, which
derives a name from ``otel_name``, the unit and the kind (the OpenTelemetry spec's
"Prometheus and OpenMetrics compatibility" rules, ``add_metric_suffixes`` on)."""

from __future__ import annotations

import re

import pytest

from fdprof import metric_names as M

#: OTel unit → Prometheus suffix, for the units fdprof uses; ``{...}`` annotations add none
UNIT_SUFFIX = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "1": "", "": ""}


def collector_name(metric: M.Metric) -> str:
    name = re.sub(r"[^a-zA-Z0-9_:]", "_", metric.otel_name)
    unit = re.sub(r"\{[^}]*\}", "", metric.unit)
    if unit not in UNIT_SUFFIX:
        raise AssertionError(f"{metric.otel_name}: unit {metric.unit!r} has no known suffix")
    suffix = UNIT_SUFFIX[unit]
    if suffix and not name.endswith(f"_{suffix}"):
        name += f"_{suffix}"
    if metric.kind == "counter":
        name += "_total"
    return name


@pytest.mark.parametrize("metric", M.ALL, ids=lambda m: m.otel_name)
def test_otlp_path_yields_the_scraped_name(metric):
    assert collector_name(metric) == metric.prom_name


def test_names_are_unique_and_labels_do_not_clash():
    assert len({m.prom_name for m in M.ALL}) == len(M.ALL)
    for metric in M.ALL:
        assert not set(metric.labels) & set(M.COMMON_LABELS), metric.prom_name
        assert metric.kind in ("histogram", "counter", "gauge")
    for label, values in M.KNOWN_VALUES.items():
        assert values and any(label in m.labels for m in M.ALL), label

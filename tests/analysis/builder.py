"""Hand-built traces for the analysis tests, through the model's own ``frame()``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fdprof.trace.attrs import AttrsBuilder
from fdprof.trace.model import SCHEMAS, Trace, frame


@dataclass
class TraceBuilder:
    spans: list[dict[str, Any]] = field(default_factory=list)
    accesses: list[dict[str, Any]] = field(default_factory=list)
    syncs: list[dict[str, Any]] = field(default_factory=list)
    attrs: list[dict[str, Any]] = field(default_factory=list)
    processes: list[dict[str, Any]] = field(default_factory=list)

    def process(self, pid: int, dp_rank: int = -1, tp_rank: int = -1, role: str = "") -> None:
        """A ``processes`` row (a trace without any has none, as a foreign one may)."""
        name = f"{role or 'process'}-{pid}"
        self.processes.append({"pid": pid, "role": role, "name": name, "anchored": True,
                               "dp_rank": dp_rank, "tp_rank": tp_rank})  # fmt: skip

    def span(
        self,
        lane: str,
        name: str,
        start: int,
        end: int,
        *,
        role: str = "",
        step: int = -1,
        reads: tuple = (),
        writes: tuple = (),
        pool: str = "gpu",
        layers: tuple[int, int] = (-1, -1),
        attrs: dict[str, Any] | None = None,
        parent: int = 0,
    ) -> int:
        """Add a span; ``reads``/``writes`` are block ids in ``pool``. Returns its id."""
        sid = len(self.spans) + 1
        pid, _, tid = lane.partition("/")
        self.spans.append(
            {"span_id": sid, "parent_id": parent, "name": name, "start": start, "end": end,
             "pid": int(pid) if pid.isdigit() else 0, "tid": int(tid) if tid.isdigit() else 0,
             "lane": lane, "role": role, "step": step, "trace_id": ""}
        )  # fmt: skip
        for mode, blocks in (("read", reads), ("write", writes)):
            for b in blocks:
                self.access(sid, pool, b, mode, layers)
        for k, v in (attrs or {}).items():
            self.attrs.append({"span_id": sid, "key": k, "value": v})
        return sid

    def access(self, sid: int, pool: str, block: int, mode: str, layers=(-1, -1)) -> None:
        self.accesses.append({"span_id": sid, "pool": pool, "block": block, "mode": mode,
                              "layer_lo": layers[0], "layer_hi": layers[1]})  # fmt: skip

    def sync(self, op: str, obj: str, time: int, lane: str, seq: int | None = None) -> None:
        """A sync event; keyed exactly when ``seq`` is given (any int64, -1 included)."""
        pid, _, tid = lane.partition("/")
        self.syncs.append({"op": op, "obj": obj, "seq": -1 if seq is None else seq,
                           "keyed": seq is not None, "time": time,
                           "pid": int(pid) if pid.isdigit() else 0,
                           "tid": int(tid) if tid.isdigit() else 0,
                           "lane": lane, "span_id": 0})  # fmt: skip

    def release(self, obj: str, time: int, lane: str, seq: int | None = None) -> None:
        self.sync("release", obj, time, lane, seq)

    def acquire(self, obj: str, time: int, lane: str, seq: int | None = None) -> None:
        self.sync("acquire", obj, time, lane, seq)

    def build(self) -> Trace:
        def cols(table: str, rows: list[dict[str, Any]]) -> dict[str, list]:
            return {c: [r[c] for r in rows] for c in SCHEMAS[table]}

        attrs = AttrsBuilder()
        for key in dict.fromkeys(a["key"] for a in self.attrs):
            mine = [a for a in self.attrs if a["key"] == key]
            attrs.add_values(key, [a["span_id"] for a in mine], [a["value"] for a in mine])
        return Trace(
            spans=frame("spans", cols("spans", self.spans)),
            accesses=frame("accesses", cols("accesses", self.accesses)),
            syncs=frame("syncs", cols("syncs", self.syncs)),
            attrs=attrs.build(),
            processes=frame("processes", cols("processes", self.processes)),
        )

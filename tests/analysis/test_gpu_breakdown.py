"""diff on traces that are not ours: steps without flags, grouped names, envelopes, and the GPU
time per step split as HTA's temporal breakdown splits it (checked against HTA itself)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from fdprof.analysis.breakdown import DEVICE_PARTS, device_breakdown, steps
from fdprof.analysis.diff import diff_traces, grouped_names
from fdprof.cli import main
from fdprof.report import text
from fdprof.report.units import duration
from fdprof.trace import load

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))
from nsys_export import PUSHPOP, add_cuda, build_export, gpid, gtid  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HTA = ROOT / ".." / "shared" / "data" / "hta"
HTA_PARTS = {"compute": ["gpu_compute"], "idle": ["gpu_idle"],
             "non_compute": ["gpu_communication", "gpu_memcpy", "gpu_memset"]}  # fmt: skip


@pytest.fixture(scope="module")
def hta():
    return {name: load(HTA / f"{name}.json.gz") for name in ("control", "test")}


def test_profiler_steps_found_without_flags_and_names_grouped(hta):
    d = diff_traces(hta["control"], hta["test"], labels=("control", "test"))
    assert d.base.n_steps == d.new.n_steps == 6
    assert d.base.breakdown["step"].tolist() == list(range(1009, 1015))
    names = set(d.by_name["name"])
    assert "ProfilerStep#*" in names and not any(n.startswith("ProfilerStep#1") for n in names)
    assert not any(n.startswith("PyTorch Profiler (") for n in names)  # the envelope
    # busy host time is the CPU ops inside steps, not the envelope (which covers all of it)
    assert (d.base.breakdown["idle"] > 0).all()
    assert grouped_names(__import__("pandas").Series(["ProfilerStep#12", "a#b", "x"])).tolist() == [
        "ProfilerStep#*",
        "a#b",
        "x",
    ]


def test_gpu_parts_sum_to_the_window_and_tile_the_device_timeline(hta):
    for trace in hta.values():
        st = steps(trace)
        gpu = device_breakdown(trace, st)
        assert len(gpu) == len(st)
        assert (gpu[list(DEVICE_PARTS)].sum(axis=1) == gpu["gpu_window"]).all()
        assert (gpu[list(DEVICE_PARTS)] >= 0).all().all()
        assert gpu["gpu_communication"].sum() > 0 and gpu["gpu_memcpy"].sum() > 0


def _hta_python(tmp_path_factory) -> Path | None:
    """HolisticTraceAnalysis's Python: the environment ``make test`` builds once
    (``FDPROF_HTA_PYTHON``, else ``.venv-hta``), or a venv of this test's own; None when it
    cannot be installed."""
    given = os.environ.get("FDPROF_HTA_PYTHON")
    built = Path(given) if given else ROOT / ".venv-hta" / "bin" / "python"
    if (built.parent.parent / ".installed-stamp").exists():
        return built.absolute()
    env_dir = tmp_path_factory.mktemp("hta") / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    got = subprocess.run([python, "-m", "pip", "install", "-q", "HolisticTraceAnalysis"],
                         capture_output=True, text=True)  # fmt: skip
    return python if got.returncode == 0 else None


HTA_SCRIPT = """
import json, sys
from hta.trace_analysis import TraceAnalysis
out = {}
for name, folder in json.loads(sys.argv[1]).items():
    df = TraceAnalysis(trace_dir=folder, include_last_profiler_step=True).get_temporal_breakdown(
        visualize=False)
    row = df.iloc[0]
    out[name] = {k: float(row[f"{k}_time(us)"]) / float(row["kernel_time(us)"]) * 100
                 for k in ("idle", "compute", "non_compute")}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_gpu_breakdown_agrees_with_hta_temporal_breakdown(hta, tmp_path_factory, tmp_path):
    """HTA's temporal breakdown of each trace, computed by HTA (every step included, as our
    per-step windows tile the same span of the device timeline), against the sum of our
    per-step split: within one percentage point per category."""
    python = _hta_python(tmp_path_factory)
    if python is None:
        pytest.skip("HolisticTraceAnalysis could not be installed")
    folders = {}
    for name in hta:  # HTA reads a folder of rank traces
        folder = tmp_path / name
        folder.mkdir()
        (folder / f"{name}.json.gz").symlink_to(HTA / f"{name}.json.gz")
        folders[name] = str(folder)
    got = subprocess.run([python, "-c", HTA_SCRIPT, json.dumps(folders)], capture_output=True,
                         text=True, cwd=tmp_path)  # fmt: skip
    assert got.returncode == 0, got.stderr[-2000:]
    theirs = json.loads(got.stdout.strip().splitlines()[-1])
    for name, trace in hta.items():
        total = device_breakdown(trace, steps(trace)).sum()
        for part, ours in HTA_PARTS.items():
            share = 100 * total[ours].sum() / total["gpu_window"]
            assert share == pytest.approx(theirs[name][part], abs=1.0), (name, part)


def _nsys_export(path: Path) -> Path:
    """Two NVTX ``iteration`` ranges, each launching a compute kernel, an NCCL kernel and a
    copy; two kernels share the short name ``elementwise`` (different templates)."""
    pid = 300
    build_export(path, [
        {"start": s, "end": s + 1000, "eventType": PUSHPOP, "text": "iteration",
         "globalTid": gtid(pid, pid)} for s in (0, 1000)
    ])  # fmt: skip
    dev = {"deviceId": 0, "contextId": 1, "globalPid": gpid(pid)}
    kernels, calls, copies = [], [], []
    for i, base in enumerate((0, 1000)):
        for j, (short, full, start, end) in enumerate([
            (10, 11 + i, base + 100, base + 400),  # elementwise<float> / elementwise<int>
            (13, 13, base + 400, base + 600),  # ncclKernel_AllReduce
        ]):  # fmt: skip
            corr = 10 * i + j + 1
            kernels.append(dev | {"start": start, "end": end, "streamId": 7 + j,
                                  "correlationId": corr, "shortName": short,
                                  "demangledName": full})  # fmt: skip
            calls.append({"start": base + 10 * (j + 1), "end": base + 10 * (j + 1) + 5,
                          "eventClass": 1, "globalTid": gtid(pid, pid), "correlationId": corr,
                          "nameId": 20, "returnValue": 0})  # fmt: skip
        copies.append(
            dev
            | {
                "start": base + 600,
                "end": base + 700,
                "streamId": 7,
                "correlationId": 10 * i + 9,
                "bytes": 64,
                "copyKind": 1,
            }
        )
        calls.append({"start": base + 50, "end": base + 55, "eventClass": 1,
                      "globalTid": gtid(pid, pid), "correlationId": 10 * i + 9, "nameId": 21,
                      "returnValue": 0})  # fmt: skip
    strings = {10: "elementwise", 11: "void elementwise<float>(float *)",
               12: "void elementwise<int>(int *)", 13: "ncclKernel_AllReduce_RING_LL_Sum",
               20: "cudaLaunchKernel_v7000", 21: "cudaMemcpyAsync_v3020"}  # fmt: skip
    return add_cuda(path, {"CUPTI_ACTIVITY_KIND_KERNEL": kernels,
                           "CUPTI_ACTIVITY_KIND_MEMCPY": copies,
                           "CUPTI_ACTIVITY_KIND_RUNTIME": calls}, strings)  # fmt: skip


def test_nsys_nvtx_range_as_step_with_device_work_per_step(tmp_path, capsys):
    path = _nsys_export(tmp_path / "steps.sqlite")
    trace = load(path)
    kernel_names = set(trace.spans["name"])
    assert {"elementwise<float>(float *)", "elementwise<int>(int *)"} <= kernel_names
    assert "Memcpy HtoD" in kernel_names
    st = steps(trace, "iteration")
    gpu = device_breakdown(trace, st).set_index("step")
    # step 0: kernel 100-400, NCCL 400-600, copy 600-700; window 100 to the next step's 1100
    assert gpu.loc[0].to_dict() == {"gpu_window": 1000, "gpu_compute": 300,
                                    "gpu_communication": 200, "gpu_memcpy": 100,
                                    "gpu_memset": 0, "gpu_idle": 400}  # fmt: skip
    assert gpu.loc[1, "gpu_window"] == 600 and gpu.loc[1, "gpu_idle"] == 0
    assert main(["diff", str(path), str(path), "--step-name", "iteration", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    parts = {r["part"]: r["base_mean"] for r in out["gpu_moved"]}
    assert parts["gpu_communication"] == 200 and parts["gpu_memcpy"] == 100
    names = {r["name"] for r in out["by_name"]}
    assert {"elementwise<float>(float *)", "elementwise<int>(int *)"} <= names


def test_durations_in_the_unit_that_fits(hta):
    assert [duration(v) for v in (0, 412, 7250, 75.4e6, 1.234e9)] == [
        "0 ns", "412 ns", "7.25 µs", "75.4 ms", "1.23 s"]  # fmt: skip
    report = text.render(diff_traces(hta["control"], hta["test"], labels=("control", "test")))
    assert "0.000" not in report
    assert "GPU time per step" in report and " µs" in report

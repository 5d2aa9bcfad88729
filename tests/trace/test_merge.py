from shared_data import DATA

from fdprof.trace import load, merge


def test_merge_anchored_runs_renumbers_colliding_ids(engine_run):
    a = load(engine_run)
    both = merge([a, load(engine_run)])
    assert len(both.spans) == 2 * len(a.spans)
    assert both.spans["span_id"].is_unique
    assert len(both.accesses) == 2 * len(a.accesses)
    assert set(both.syncs["span_id"]) - {0} <= set(both.spans["span_id"])
    kids = both.spans[both.spans["parent_id"] != 0]
    assert kids["parent_id"].isin(both.spans["span_id"]).all()
    assert any("renumbered" in w for w in both.meta["warnings"])
    assert not any("no clock anchor" in w for w in both.meta["warnings"])


def test_merge_says_when_anchors_are_missing(engine_run, tmp_path):
    chrome = tmp_path / "t.json"
    chrome.write_text('[{"ph": "X", "name": "k", "pid": 5, "tid": 6, "ts": 1, "dur": 1}]')
    both = merge([load(engine_run), load(chrome)])
    warnings = both.meta["warnings"]
    assert any("process 5 has no clock anchor" in w for w in warnings)
    assert len(both.spans) == len(load(engine_run).spans) + 1


def test_merge_with_nsys_export():
    both = merge([load(DATA / "nsys" / "YoonKyonghwan__EfficientCenterFormer__baseline.sqlite")])
    assert len(both.spans) == 649

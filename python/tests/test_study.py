"""rrpdem.study runs a study as `rrpdem study` does: the same table and the same variant
outputs, bit for bit; variants are read lazily."""

import json

import numpy as np
import pytest
import rrpdem
from conftest import assert_columns_equal, cli, csv_exact, rupture_torus, write_json

SPEEDS = [0.5, 1.5, 3.0]


def study_dict(scenario):
    return {"name": "speeds", "base": str(scenario.name), "set": {"/t_end": 3},
            "vary": {"grid": {"/@impact_speed": SPEEDS}}}


def test_study_equals_cli(tmp_path):
    scenario = rupture_torus(tmp_path)
    f = write_json(tmp_path / "speeds.json", study_dict(scenario))
    cli("study", f, "--out", tmp_path / "cli")
    r = rrpdem.study(f, out=tmp_path / "py")
    want = csv_exact(tmp_path / "cli" / "study.csv")
    timing = ("wall_time_s", "particle_steps_per_s")
    assert_columns_equal({k: v for k, v in r.table.items() if k not in timing},
                         {k: v for k, v in want.items() if k not in timing}, "study.csv")
    assert r.table["/@impact_speed"].tolist() == SPEEDS and r.failed == {}
    assert r.table["status"].tolist() == ["completed"] * 3
    # Distinct speeds give distinct outcomes (the table can expose a mix-up of variants).
    assert len(set(r.table["broken_fraction"].tolist())) == 3
    assert len(r.variants) == 3
    for k in range(3):
        v = r.variants[k]
        assert v.summary["scenario"]["name"] == f"speeds_{k}"
        assert_columns_equal(v.series, csv_exact(tmp_path / "cli" / "variants" / str(k) / "series.csv"), f"v{k}")
        assert_columns_equal(v.final, csv_exact(tmp_path / "cli" / "variants" / str(k) / "final_state.csv"), f"v{k}")
    assert r.variants[-1] is r.variants[2]
    with pytest.raises(IndexError):
        r.variants[3]


def test_study_from_dict_in_a_temporary_folder(tmp_path, monkeypatch):
    scenario = rupture_torus(tmp_path)
    monkeypatch.chdir(tmp_path)  # a dict's relative `base` is taken from the working folder
    r = rrpdem.study(study_dict(scenario))
    out = r.out
    assert out.is_dir() and (out / "study.csv").is_file()
    # The same numbers as the run of variant 1 alone.
    alone = rrpdem.run(rrpdem.Scenario(scenario, t_end=3, bodies=[
        {**json.loads(scenario.read_text())["bodies"][0], "velocity": [-1.5, 0.0, 0.0]}]))
    assert np.array_equal(r.variants[1].series["E"], alone.series["E"])
    assert np.array_equal(r.variants[1].final["x"], alone.final["x"])
    # --resume keeps completed variants; the temporary folder goes with the result.
    again = rrpdem.study(study_dict(scenario), out=out, resume=True)
    assert again.table["status"].tolist() == ["completed"] * 3
    del r, again
    import gc

    gc.collect()
    assert not out.exists()


def test_a_temporary_studys_variants_outlive_its_result_and_empty_outcomes_are_nan(tmp_path, monkeypatch):
    # Before: the variants of a study without `out` were lost with its result ("it did not run"),
    # slicing them failed, and an outcome no variant has came back as strings ('' cells).
    scenario = rupture_torus(tmp_path)
    monkeypatch.chdir(tmp_path)
    d = {"name": "short", "base": str(scenario.name), "set": {"/t_end": 0.2},
         "vary": {"list": [{}, {"/record_every": 7}]}}
    r = rrpdem.study(d, progress=False)
    folder = r.out
    table = r.table
    variants = r.variants
    del r
    import gc
    gc.collect()
    assert folder.is_dir(), "the variants still refer to the folder"
    assert variants[1].summary["scenario"]["name"] == "short_1"
    assert [v.summary["scenario"]["name"] for v in variants[0:2]] == ["short_0", "short_1"]
    # t_end 0.2: nothing has rebounded, so the rebound columns are empty everywhere: NaN floats.
    for c in ("rebound_speed", "restitution"):
        assert table[c].dtype == np.float64 and np.isnan(table[c]).all(), (c, table[c])
    del variants
    gc.collect()
    assert not folder.exists(), "removed once nothing refers to it"


def test_a_study_file_that_cannot_be_read_is_a_study_error_without_out(tmp_path):
    # Before, without `out`, the file was opened to name the temporary folder: a missing file
    # raised FileNotFoundError, bad JSON JSONDecodeError, a list AttributeError.
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "bad.json").write_text("{not json")
    for name in ("missing.json", "list.json", "bad.json"):
        with pytest.raises(rrpdem.StudyError):
            rrpdem.study(tmp_path / name, progress=False)

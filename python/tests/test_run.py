"""rrpdem.run goes through the CLI's run driver: its arrays equal what `rrpdem run` writes for
the same scenario, bit for bit (series, final state, breaks, fragments, summary)."""

import json

import numpy as np
import pytest
import rrpdem
from conftest import assert_columns_equal, cli, csv_exact, rupture_torus, summary_core


def compare_with_cli(result, cli_dir):
    """`result` (a RunResult) against the folder the CLI wrote."""
    assert_columns_equal(result.series, csv_exact(cli_dir / "series.csv"), "series")
    assert_columns_equal(result.final, csv_exact(cli_dir / "final_state.csv"), "final")
    for name in ("breaks", "fragments"):
        have = getattr(result, name)
        if (cli_dir / f"{name}.csv").is_file():
            assert_columns_equal(have, csv_exact(cli_dir / f"{name}.csv"), name)
        else:
            assert have is None
    assert summary_core(result.summary) == summary_core(cli_dir / "summary.json")


def test_run_equals_cli_bit_for_bit(tmp_path):
    scenario = rupture_torus(tmp_path)
    cli("run", scenario, "--out", tmp_path / "cli")
    r = rrpdem.run(scenario, out=tmp_path / "py")
    assert r.status == "completed" and r.out == tmp_path / "py"
    # The test data can expose a mistake: bonds broke, the torus moved, many records.
    assert r.breaks is not None and len(r.breaks["bond"]) > 0 and r.summary["final_diagnostics"]["n_broken"] > 0
    assert len(r.series["step"]) == 6000 // 25 + 1 and r.series["step"][-1] == 6000
    assert r.series["E"].dtype == np.float64 and r.series["step"].dtype == np.int64
    assert r.breaks["mode"].dtype.kind == "U"
    compare_with_cli(r, tmp_path / "cli")
    # The folder is the CLI's too: the files are byte for byte the same.
    for f in ("series.csv", "final_state.csv", "breaks.csv", "fragments.csv"):
        assert (tmp_path / "py" / f).read_bytes() == (tmp_path / "cli" / f).read_bytes(), f


def test_run_without_folder_and_options(tmp_path):
    scenario = rupture_torus(tmp_path, t_end=1.0)
    kept = {p.name for p in tmp_path.iterdir()}
    r = rrpdem.run(rrpdem.Scenario(scenario), out=None, backend="cpu")
    assert r.out is None and r.status == "completed" and r.summary["engine"]["backend"] == "cpu"
    assert {p.name for p in tmp_path.iterdir()} == kept
    # A dict runs too, and gives the same numbers as the file it came from.
    again = rrpdem.run(json.loads(scenario.read_text()))
    assert np.array_equal(again.series["E"], r.series["E"]) and np.array_equal(again.final["x"], r.final["x"])
    # A folder holding a run is refused unless overwrite, as on the CLI.
    rrpdem.run(scenario, out=tmp_path / "o", checkpoint_every=100, plots=True)
    assert (tmp_path / "o" / "checkpoint.bin").is_file() and any((tmp_path / "o").glob("*.png"))
    with pytest.raises(rrpdem.RunError, match="overwrite"):
        rrpdem.run(scenario, out=tmp_path / "o")
    rrpdem.run(scenario, out=tmp_path / "o", overwrite=True)


def test_series_as_pandas_without_copy(tmp_path):
    pd = pytest.importorskip("pandas")
    r = rrpdem.run(rupture_torus(tmp_path, t_end=0.5))
    frame = r.series_frame()
    assert isinstance(frame, pd.DataFrame) and list(frame.columns) == list(r.series)
    for name in ("E", "step", "P_x"):
        assert np.shares_memory(frame[name].to_numpy(), r.series[name]), name


def test_bench_measures_a_case():
    report = rrpdem.bench("torus", steps=20, min_seconds=0.0)
    (m,) = report["measurements"]
    assert (m["case"], m["particles"], m["bonds"], m["threads"]) == ("torus", 80, 80, 1)
    assert m["particle_steps_per_s"] > 0 and m["steps"] >= 20
    with pytest.raises(ValueError, match="unknown engine"):
        rrpdem.bench("torus", engines="tpu")
    # A negative or NaN minimum time was taken as "none" (one round) without a word.
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="minimum time"):
            rrpdem.bench("torus", steps=20, min_seconds=bad)


def test_a_failed_run_still_issues_its_warnings(tmp_path):
    # Before, RunError was raised without the warning that explains it ("dt is …% of the
    # stability estimate"): the run's messages were returned only on success.
    s = rrpdem.Scenario(rupture_torus(tmp_path), dt=2e-2, force_dt=True, t_end=20)
    with pytest.warns(rrpdem.RrpdemWarning, match="stability estimate"):
        with pytest.raises(rrpdem.RunError) as e:
            rrpdem.run(s, out=tmp_path / "out", progress=False)
    assert any("stability estimate" in m for m in e.value.messages), e.value.messages


def test_plots_without_a_folder_are_refused_before_the_run(tmp_path):
    # Before, the figures were drawn into the temporary folder and removed with it, silently.
    with pytest.raises(ValueError, match="give out="):
        rrpdem.run(rupture_torus(tmp_path), plots=True, progress=False)


def test_a_breaks_table_without_rows_has_the_dtypes_of_one_with_rows(tmp_path):
    # Before: breaks.csv of a rupture run in which nothing broke came back as float64 columns
    # only, so `step`, `bond`, `i`, `j` (int64) and `mode` (str) changed dtype with the outcome.
    broke = rrpdem.run(rupture_torus(tmp_path, name="broke", t_end=6.0))
    quiet = rrpdem.run(rupture_torus(tmp_path, name="quiet", t_end=0.1))
    assert len(broke.breaks["step"]) > 0 and len(quiet.breaks["step"]) == 0
    assert list(quiet.breaks) == list(broke.breaks)
    for name, col in broke.breaks.items():
        assert quiet.breaks[name].dtype.kind == col.dtype.kind, (name, quiet.breaks[name].dtype, col.dtype)
    # The two concatenate as a study's variants would.
    joined = np.concatenate([quiet.breaks["bond"], broke.breaks["bond"]])
    assert joined.dtype == np.int64

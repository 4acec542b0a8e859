"""The GPU engine in f64 (on Mesa's software Vulkan, lavapipe, where no GPU is present) from
Python: a run and a stepped engine equal the CLI's GPU run bit for bit."""

import rrpdem
from conftest import assert_columns_equal, cli, csv_exact, rupture_torus, summary_core
from test_engine import step_like_the_cli


def test_gpu_f64_run_equals_cli(tmp_path):
    scenario = rupture_torus(tmp_path, t_end=3.0)
    cli("run", scenario, "--backend", "gpu", "--precision", "f64", "--out", tmp_path / "cli")
    r = rrpdem.run(scenario, backend="gpu", precision="f64", out=tmp_path / "py")
    assert r.summary["engine"]["backend"] == "gpu" and r.summary["engine"]["precision"] == "f64"
    assert r.summary["final_diagnostics"]["n_broken"] > 0
    assert_columns_equal(r.series, csv_exact(tmp_path / "cli" / "series.csv"), "series")
    assert_columns_equal(r.final, csv_exact(tmp_path / "cli" / "final_state.csv"), "final")
    assert_columns_equal(r.breaks, csv_exact(tmp_path / "cli" / "breaks.csv"), "breaks")
    assert summary_core(r.summary) == summary_core(tmp_path / "cli" / "summary.json")


def test_gpu_f64_engine_equals_cli(tmp_path):
    e = step_like_the_cli(tmp_path, backend="gpu", precision="f64", t_end=3.0)
    assert e.info["backend"] == "gpu" and e.info["precision"] == "f64"

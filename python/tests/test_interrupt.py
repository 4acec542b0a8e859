"""Ctrl-C (SIGINT) in Python interrupts a run as on the CLI: the run stops after its current
chunk of steps with status `interrupted`, every output and a checkpoint written, and only then
is KeyboardInterrupt raised; the run resumed from there equals an uninterrupted one bit for
bit."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import rrpdem
from conftest import assert_columns_equal, cli, csv_exact, rupture_torus

CHILD = r"""
import json, sys, rrpdem
what, scenario, out = sys.argv[1:4]
print("ready", flush=True)
try:
    if what == "run":
        rrpdem.run(scenario, out=out, progress=False)
    elif what == "study":
        # No `out`: a temporary folder, which an interrupt must not take away.
        rrpdem.study({"name": "s", "base": scenario, "vary": {"list": [{}, {"/record_every": 7}]}}, progress=False)
    else:
        e = rrpdem.Engine(scenario)
        try:
            e.advance(10**8)
        finally:
            print(json.dumps({"engine_steps": e.steps, "diag_step": e.diagnostics()["step"]}), flush=True)
    print(json.dumps({"raised": None}), flush=True)
except KeyboardInterrupt as e:
    from pathlib import Path
    print(json.dumps({"raised": type(e).__name__, "run_interrupted": isinstance(e, rrpdem.RunInterrupted),
                      "out": str(getattr(e, "out", None)), "step": getattr(e, "step", None),
                      "summary_there": Path(out, "summary.json").is_file(),
                      "study_csv": getattr(e, "out", None) is not None and Path(e.out, "study.csv").is_file()}),
          flush=True)
"""


def interrupt_child(tmp_path, what, scenario, out, started):
    """Starts the child, waits until `started()` says the work is under way, sends SIGINT and
    returns the child's JSON lines."""
    env = {**os.environ, "NODEVICE_SELECT": "1"}
    p = subprocess.Popen([sys.executable, "-c", CHILD, what, str(scenario), str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 30
    while not started() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 0, stderr
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_ctrl_c_stops_a_run_with_its_outputs_and_resumes_bit_for_bit(tmp_path):
    scenario = rupture_torus(tmp_path, t_end=3000.0)  # 3·10⁶ steps: far longer than the test waits
    out = tmp_path / "run"
    (result,) = interrupt_child(tmp_path, "run", scenario, out, lambda: (out / "series.csv").is_file())
    assert result["raised"] == "RunInterrupted" and result["run_interrupted"] and result["summary_there"]
    assert result["out"] == str(out)
    summary = json.loads((out / "summary.json").read_text())
    step = summary["steps"]
    assert summary["status"] == "interrupted" and step == result["step"] and 0 < step < 3_000_000
    assert (out / "checkpoint.bin").is_file() and (out / "final_state.csv").is_file()
    # Continued to a little past the interrupt, it equals the CLI's run straight there.
    t_end = (step + 500) * 1e-3
    resumed = rrpdem.resume(out, t_end=t_end)
    assert resumed.status == "completed" and resumed.summary["steps"] == step + 500
    cli("run", scenario, "--t-end", repr(t_end), "--out", tmp_path / "cli")
    assert_columns_equal(resumed.series, csv_exact(tmp_path / "cli" / "series.csv"), "series")
    assert_columns_equal(resumed.final, csv_exact(tmp_path / "cli" / "final_state.csv"), "final")
    assert_columns_equal(resumed.breaks, csv_exact(tmp_path / "cli" / "breaks.csv"), "breaks")


def test_ctrl_c_stops_an_engine_at_a_whole_step(tmp_path):
    scenario = rupture_torus(tmp_path, t_end=1.0)
    started_at = time.monotonic()
    lines = interrupt_child(tmp_path, "engine", scenario, tmp_path / "unused",
                            lambda: time.monotonic() - started_at > 1.0)
    steps, raised = lines
    assert raised["raised"] == "KeyboardInterrupt" and not raised["run_interrupted"]
    assert 0 < steps["engine_steps"] < 10**8 and steps["diag_step"] == steps["engine_steps"]
    assert not Path(tmp_path / "unused").exists()


def test_ctrl_c_keeps_a_temporary_studys_folder_for_resume(tmp_path):
    # Before, a study run without `out` lost its checkpoints and study.csv with its temporary
    # folder when Ctrl-C unwound (a new user's check, 2026-11-27).
    scenario = rupture_torus(tmp_path, t_end=3000.0)
    started_at = time.monotonic()
    (result,) = interrupt_child(tmp_path, "study", scenario, tmp_path / "unused",
                                lambda: time.monotonic() - started_at > 2.0)
    assert result["raised"] == "KeyboardInterrupt" and result["study_csv"], result
    out = Path(result["out"])
    try:
        status = csv_exact(out / "study.csv")["status"]
        assert set(status) <= {"interrupted", "missing"} and "interrupted" in status, status
        assert any((out / "variants" / str(k) / "checkpoint.bin").is_file() for k in range(2))
    finally:
        import shutil
        shutil.rmtree(out.parent, ignore_errors=True)

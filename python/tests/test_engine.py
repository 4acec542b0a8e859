"""rrpdem.Engine stepped from Python reproduces `rrpdem run` bit for bit: each record's
diagnostics, the breaks and the final state."""

import json
import numpy as np
import pytest
import rrpdem
from conftest import assert_columns_equal, cli, csv_exact, rupture_torus

DIAGNOSTIC_COLUMNS = 31  # series.csv's columns before E_scale (Diagnostics::csv_row), then E_dissipated


def step_like_the_cli(tmp_path, backend=None, precision=None, **extra):
    scenario = rupture_torus(tmp_path, **extra)
    args = [] if backend is None else ["--backend", backend, "--precision", precision]
    cli("run", scenario, "--out", tmp_path / "cli", *args)
    series = csv_exact(tmp_path / "cli" / "series.csv")
    e = rrpdem.Engine(scenario, backend=backend, precision=precision)
    rows = {name: [] for name in list(series)[:DIAGNOSTIC_COLUMNS] + ["E_dissipated"]}
    for step in series["step"]:
        e.advance(step - e.steps)
        d = e.diagnostics()
        assert d["step"] == step
        for name in rows:
            rows[name].append(d[name])
    have = {k: np.array(v) for k, v in rows.items()}
    want = {k: series[k] for k in rows}
    assert_columns_equal(have, want, "diagnostics")
    assert_columns_equal(e.state(), csv_exact(tmp_path / "cli" / "final_state.csv"), "state")
    breaks = e.take_breaks()
    assert_columns_equal(breaks, csv_exact(tmp_path / "cli" / "breaks.csv"), "breaks")
    assert len(breaks["bond"]) > 0 and len(e.take_breaks()["bond"]) == 0
    return e


def test_engine_equals_cli_run(tmp_path):
    e = step_like_the_cli(tmp_path)
    assert e.info["backend"] == "cpu" and e.n_particles == 80 and e.steps == 6000
    p = e.positions()
    assert p.shape == (80, 3) and np.array_equal(p[:, 0], e.state()["x"])


def test_engine_with_damping_and_friction_equals_cli_run(tmp_path):
    # MODEL §10 on: E_dissipated grows, and every column (E_dissipated included) is the run's.
    e = step_like_the_cli(
        tmp_path,
        damping={"restitution": 0.6, "wall_restitution": 0.4, "binder": {"axial": 0.5}},
        friction={"wall_coefficient": 0.5},
    )
    assert e.diagnostics()["E_dissipated"] > 1.0


def test_engine_clumps_equal_the_runs_clumps_csv(tmp_path):
    # MODEL §12: a clump run's clumps.csv rows at the end are the Engine's clumps(), bit for bit.
    from conftest import SCENARIOS
    scenario = SCENARIOS / "full_body.json"
    cli("run", scenario, "--t-end", "5", "--out", tmp_path / "cli")
    rows = csv_exact(tmp_path / "cli" / "clumps.csv")
    e = rrpdem.Engine(scenario)
    assert e.info["backend"] == "cpu"
    e.advance(500)
    have = e.clumps()
    last = [k for k, step in enumerate(rows["step"]) if step == 500]
    want = {name: np.array([rows[name][k] for k in last]) for name in have}
    assert len(last) == 2 and len(have["clump"]) == 2
    assert_columns_equal(have, want, "clumps")
    # A model without clumps has none.
    assert len(rrpdem.Engine(SCENARIOS / "pendulum.json").clumps()["x"]) == 0


def test_engine_checks_the_particle_order_as_a_run(tmp_path):
    # particle_order "spatial" with a short check interval: the engine stops where the run
    # checks its order (the check itself must leave the trajectory as the run's).
    step_like_the_cli(tmp_path, particle_order="spatial", order_check_every=300)


def test_engine_errors(tmp_path):
    with pytest.raises(rrpdem.RunError, match="stability"):
        rrpdem.Engine(rupture_torus(tmp_path, dt=0.05))
    with pytest.raises(rrpdem.RunError, match="f32"):
        rrpdem.Engine(rupture_torus(tmp_path), backend="cpu", precision="f32")


def test_engine_used_from_two_threads_is_busy_not_deadlocked(tmp_path):
    import threading

    e = rrpdem.Engine(rupture_torus(tmp_path, t_end=1.0))
    t = threading.Thread(target=e.advance, args=(300_000,))
    t.start()
    try:
        import time

        time.sleep(0.2)
        with pytest.raises(RuntimeError, match="busy"):
            e.state()
    finally:
        t.join()
    assert e.steps == 300_000 and e.diagnostics()["step"] == 300_000


def test_engine_tangential_displacement_is_the_sliding_bound(tmp_path):
    # MODEL §10: a sphere sliding on a wall without a dashpot keeps its spring-slider at the
    # Coulomb bound, |xi| = 2 mu s / (3 kappa) with s = r - x its overlap (kappa = 2/7); the
    # field VTK frames show, here from the Engine; None without friction.
    k, g, r, mu, kappa = 2100.0, 10.0, 0.05, 0.3, 2.0 / 7.0
    s0 = (g / (k / r**2.5)) ** (2.0 / 3.0)
    for friction in [True, False]:
        scenario = {
            "name": "slide", "dt": 1e-4, "t_end": 0.02,
            "particle": {"mass": 1, "inertia": 0.001, "diameter": 0.1},
            "stiffness": {"contact": k, "wall": k}, "gravity": [-g, 0, 0],
            "walls": [{"point": [0, 0, 0], "normal": [1, 0, 0]}],
            "bodies": [{"type": "particles", "particles": [{"x": [r - s0, 0, 0], "v": [0, 0.5, 0]}]}],
        }
        if friction:
            scenario["friction"] = {"wall_coefficient": mu}
        path = tmp_path / f"slide_{friction}.json"
        path.write_text(json.dumps(scenario))
        e = rrpdem.Engine(path)
        e.advance(150)
        xi = e.tangential_displacement()
        if not friction:
            assert xi is None
            continue
        s = r - e.state()["x"][0]
        want = 2 * mu * s / (3 * kappa)
        assert xi.shape == (1,) and abs(xi[0] - want) <= 1e-12 * want, (xi, want)

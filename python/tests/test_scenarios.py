"""Scenarios from files, dicts and keyword arguments: every scenario file round-trips, and
`generate()` gives the model `rrpdem generate` writes, bit for bit."""

import json

import numpy as np
import pytest
import rrpdem
from conftest import SCENARIOS, cli, csv_exact

SCENARIO_FILES = sorted(p for p in SCENARIOS.glob("*.json") if "vary" not in json.loads(p.read_text()))


def test_every_scenario_file_is_tested():
    # The repository's scenario files (the study torus_sweep.json aside): a new one is picked up.
    assert {p.name for p in SCENARIO_FILES} >= {"torus_impact.json", "solid_torus_impact.json", "truss.json",
                                                "four_mass.json", "pendulum.json", "two_rings.json"}


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: p.stem)
def test_round_trip(path, tmp_path):
    s = rrpdem.Scenario(path)
    assert s.name == json.loads(path.read_text())["name"]
    # dict -> Scenario, keyword arguments -> Scenario, JSON text -> file -> Scenario: all equal
    # (the library's own equality, which compares every field).
    d = s.to_dict()
    assert rrpdem.Scenario(d, path=path) == s
    assert rrpdem.Scenario(path=path, **d) == s
    assert json.loads(rrpdem.Scenario(d, path=path).to_json()) == d
    # Saved elsewhere and read back (no scenario file here reads CSV files: the anchor does
    # not matter; the library's equality then differs only in `source`).
    again = rrpdem.Scenario(s.save(tmp_path / path.name))
    assert again.to_dict() == d and again.source == tmp_path / path.name
    assert rrpdem.Scenario(again, path=path) == s


def has_clumps(path):
    """A scenario with rigid clumps (MODEL §12): `rrpdem generate` refuses it (CSV rows are free spheres)."""
    bodies = json.loads(path.read_text())["bodies"]
    return any(b["type"] == "clump" or (b["type"] == "pendulum" and "inertia" in b) for b in bodies)


@pytest.mark.parametrize(
    "path",
    [p for p in SCENARIO_FILES if p.stem != "solid_torus_large" and not has_clumps(p)],
    ids=lambda p: p.stem,
)
def test_generate_equals_cli(path, tmp_path):
    # `rrpdem generate` writes the resolved model (17 significant digits): generate() must hold
    # exactly those values.
    cli("generate", path, "--out", tmp_path / "g")
    want = csv_exact(tmp_path / "g" / "particles.csv")
    g = rrpdem.Scenario(path).generate()
    n = len(want["id"])
    assert g["positions"].shape == (n, 3) and g["attitudes"].shape == (n, 4)
    pairs = {
        "x": g["positions"][:, 0], "y": g["positions"][:, 1], "z": g["positions"][:, 2],
        "vx": g["velocities"][:, 0], "vy": g["velocities"][:, 1], "vz": g["velocities"][:, 2],
        "qw": g["attitudes"][:, 0], "qx": g["attitudes"][:, 1], "qy": g["attitudes"][:, 2], "qz": g["attitudes"][:, 3],
        "wx": g["angular_velocities"][:, 0], "wy": g["angular_velocities"][:, 1], "wz": g["angular_velocities"][:, 2],
        "mass": g["masses"], "inertia": g["inertias"], "diameter": g["diameters"],
    }
    for col, have in pairs.items():
        want_col = np.array(want[col], dtype=np.float64)
        if col.startswith("q"):
            # generate writes qw >= 0 (q and -q are one attitude).
            sign = np.where(g["attitudes"][:, 0] < 0, -1.0, 1.0)
            have = have * sign
        assert np.array_equal(have.view(np.int64), want_col.view(np.int64)), f"{path.stem}: column {col}"
    assert g["fixed"].tolist() == [bool(v) for v in want["fixed"]]
    bonds = csv_exact(tmp_path / "g" / "bonds.csv")
    assert g["bonds"].tolist() == [[i, j] for i, j in zip(bonds["i"], bonds["j"])]
    assert g["bond_rest_lengths"].shape == (len(bonds["i"]),)


@pytest.mark.parametrize("path", [p for p in SCENARIO_FILES if has_clumps(p)], ids=lambda p: p.stem)
def test_generate_keeps_clumps_whole_or_refuses(path, tmp_path):
    # The CLI refuses to write a clump's spheres as free CSV particles; generate() still shows
    # the spheres where the scenario puts them at t = 0.
    r = cli("generate", path, "--out", tmp_path / "g", check=False)
    assert r.returncode != 0 and "rigid bod" in r.stderr and not (tmp_path / "g" / "particles.csv").exists()
    g = rrpdem.Scenario(path).generate()
    assert g["positions"].shape[0] >= 1 and np.isfinite(g["positions"]).all()


def test_keyword_scenario_and_overrides():
    s = rrpdem.Scenario(
        name="kw", dt=0.01, t_end=0.5, particle={"mass": 2, "inertia": 3, "diameter": 1},
        bodies=[{"type": "particles", "particles": [{"x": [0, 0, 0], "v": [1, 0, 0]}, {"x": [1.5, 0, 0]}]}],
    )
    assert (s.name, s.dt, s.t_end, s.total_steps) == ("kw", 0.01, 0.5, 50)
    g = s.generate()
    assert g["masses"].tolist() == [2.0, 2.0] and g["positions"][1].tolist() == [1.5, 0.0, 0.0]
    t = rrpdem.Scenario(SCENARIOS / "torus_impact.json", t_end=2, record_every=5)
    assert (t.t_end, t.record_interval, t.total_steps) == (2.0, 5, 2000)
    assert t.replace(dt=5e-4).total_steps == 4000
    assert t != rrpdem.Scenario(SCENARIOS / "torus_impact.json")
    # numpy values are written as JSON numbers.
    u = rrpdem.Scenario(t, gravity=np.array([0.0, -9.81, 0.0]), dt=np.float64(2e-3))
    assert u.to_dict()["gravity"] == [0.0, -9.81, 0.0] and u.dt == 2e-3


def test_fields_over_a_file_read_it_as_strictly_as_the_file_alone(tmp_path):
    # Before, Scenario(file, **fields) read the file with Python's json (a field given twice
    # silently took its last value; NaN gave a bare ValueError) while Scenario(file) refused it.
    dup = tmp_path / "dup.json"
    dup.write_text('{"name": "d", "dt": 1e-3, "dt": 2e-3, "t_end": 1, "particle": {"mass": 1, "inertia": 1, '
                   '"diameter": 1}, "bodies": [{"type": "particles", "particles": [{"x": [0, 0, 0]}]}]}')
    for make in (lambda: rrpdem.Scenario(dup), lambda: rrpdem.Scenario(dup, t_end=2)):
        with pytest.raises(rrpdem.ScenarioError, match="duplicate field `dt`"):
            make()
    with pytest.raises(rrpdem.ScenarioError) as e:
        rrpdem.Scenario(tmp_path / "missing.json", t_end=1)
    assert "missing.json" in str(e.value)


def test_a_non_finite_number_is_refused_naming_its_field():
    # Before: ValueError("Out of range float values are not JSON compliant"), no field.
    base = SCENARIOS / "torus_impact.json"
    with pytest.raises(rrpdem.ScenarioError) as e:
        rrpdem.Scenario(base, dt=float("nan"))
    assert e.value.field == "dt" and "finite" in str(e.value)
    with pytest.raises(rrpdem.ScenarioError) as e:
        rrpdem.Scenario(base, gravity=np.array([0.0, 0.0, np.inf]))
    assert e.value.field == "gravity[2]"
    with pytest.raises(rrpdem.StudyError, match=r"vary\.list\[0\]\./dt"):
        rrpdem.study({"name": "s", "base": str(base), "vary": {"list": [{"/dt": float("nan")}]}}, progress=False)

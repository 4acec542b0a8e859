"""Shared helpers of the Python package's tests: the repository's paths, the CLI binary the
results are compared with, and an exact reader of the CSV files the CLI writes."""

import csv
import json
import os
import subprocess
from pathlib import Path

# Silences Mesa's device-select layer (as .cargo/config.toml does for cargo), before any
# Vulkan instance is made.
os.environ.setdefault("NODEVICE_SELECT", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"


def cli_path() -> Path:
    """The `rrpdem` binary of this checkout (built by `cargo test --release`, which
    scripts/test runs first), or RRPDEM_CLI."""
    p = Path(os.environ.get("RRPDEM_CLI", REPO / "target" / "release" / "rrpdem"))
    if not p.is_file():
        pytest.fail(f"no rrpdem binary at {p}: build it with `cargo build --release` (or set RRPDEM_CLI)")
    return p


def cli(*args, check=True):
    """Runs the CLI with `args`; returns the completed process (stdout and stderr as text)."""
    r = subprocess.run([str(cli_path()), *map(str, args)], capture_output=True, text=True,
                       env={**os.environ, "NODEVICE_SELECT": "1"})
    if check and r.returncode != 0:
        raise AssertionError(f"rrpdem {' '.join(map(str, args))} exited {r.returncode}:\n{r.stderr}")
    return r


def csv_exact(path):
    """A CSV file as {column: list of Python values}: int() where the text is an integer,
    float() where it is a number (Python's float() rounds correctly, so the 17 significant
    digits the CLI prints give back its f64 exactly), else the text."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    out = {}
    for c, name in enumerate(header):
        cells = [r[c] for r in body]

        def value(text):
            try:
                return int(text)
            except ValueError:
                pass
            try:
                return float(text) if text != "" else float("nan")
            except ValueError:
                return text

        out[name] = [value(t) for t in cells]
    return out


def assert_columns_equal(got, expected, what):
    """Every column of `expected` (parsed by `csv_exact`) equals `got`'s bit for bit."""
    assert list(got) == list(expected), f"{what}: columns differ"
    for name, want in expected.items():
        have = got[name]
        assert len(have) == len(want), f"{what}.{name}: {len(have)} rows, expected {len(want)}"
        if have.dtype.kind == "f":
            want_bits = np.array(want, dtype=np.float64).view(np.int64)
            bad = np.nonzero(have.view(np.int64) != want_bits)[0]
            assert bad.size == 0, f"{what}.{name}: row {bad[:1]} {have[bad[:1]]} != {np.array(want)[bad[:1]]}"
        elif have.dtype.kind == "i":
            assert have.tolist() == [int(v) for v in want], f"{what}.{name} differs"
        else:
            assert have.tolist() == [str(v) for v in want], f"{what}.{name} differs"


def summary_core(path_or_dict):
    """summary.json without what differs between two runs of the same scenario (timings,
    provenance)."""
    s = path_or_dict if isinstance(path_or_dict, dict) else json.loads(Path(path_or_dict).read_text())
    return {k: v for k, v in s.items() if k not in ("wall_time_s", "particle_steps_per_s", "provenance")}


def write_json(path, obj):
    Path(path).write_text(json.dumps(obj, indent=1))
    return Path(path)


def rupture_torus(tmp_path, name="torus_rupture", t_end=6.0, **extra):
    """The paper's torus (80 spheres) with binder rupture, fast to run and breaking bonds: a
    scenario file in `tmp_path`."""
    s = json.loads((SCENARIOS / "torus_impact.json").read_text())
    s.update(name=name, t_end=t_end, rupture={"bending": 0.3}, record_every=25)
    s["bodies"][0]["velocity"] = [-2, 0, 0]
    s.update(extra)
    return write_json(tmp_path / f"{name}.json", s)

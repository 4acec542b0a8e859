"""What the Python layer costs over the CLI on a run of a 10⁵-particle ring (docs/PYTHON.md):
the same scenario run by the `rrpdem` binary (a process, timed from outside) and by
rrpdem.run (in this process, results read back into numpy), each several times, best kept.

    python3 python/tools/overhead.py [--steps 200] [--repeat 3] [--cli target/release/rrpdem]
"""

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import rrpdem

REPO = Path(__file__).resolve().parents[2]


def ring(steps: int, n: int) -> dict:
    return {
        "name": "ring_1e5", "dt": 1e-3, "t_end": steps * 1e-3, "record_every": 10, "backend": "cpu",
        "particle": {"mass": 1, "inertia": 1},
        "stiffness": {"bending": 10, "axial": 200, "shear": 200, "contact": 2100, "wall": 2100},
        "walls": [{"point": [0, 0, 0], "normal": [1, 0, 0]}],
        "bodies": [{"type": "torus_ring", "n": n, "particle_diameter": 1, "gap": 0, "velocity": [-1, 0, 0]}],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--particles", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cli", default=str(REPO / "target" / "release" / "rrpdem"))
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rrpdem-overhead-"))
    f = tmp / "ring.json"
    f.write_text(json.dumps(ring(a.steps, a.particles)))
    env = {**os.environ, "NODEVICE_SELECT": "1"}
    rows = {"cli process": [], "cli run (summary)": [], "python run()": [], "python run() engine (summary)": [],
            "python run(out=None)": [], "python Engine.advance": []}
    for k in range(a.repeat):
        t0 = time.perf_counter()
        subprocess.run([a.cli, "run", str(f), "--out", str(tmp / f"cli{k}")], check=True, env=env,
                       capture_output=True)
        rows["cli process"].append(time.perf_counter() - t0)
        rows["cli run (summary)"].append(json.loads((tmp / f"cli{k}" / "summary.json").read_text())["wall_time_s"])
        t0 = time.perf_counter()
        r = rrpdem.run(f, out=tmp / f"py{k}", progress=False)
        rows["python run()"].append(time.perf_counter() - t0)
        rows["python run() engine (summary)"].append(r.summary["wall_time_s"])
        t0 = time.perf_counter()
        rrpdem.run(f, progress=False)
        rows["python run(out=None)"].append(time.perf_counter() - t0)
        e = rrpdem.Engine(f)
        t0 = time.perf_counter()
        e.advance(a.steps)
        rows["python Engine.advance"].append(time.perf_counter() - t0)
    n = r.summary["particles"]
    print(f"{n} particles, {a.steps} steps, {len(r.series['step'])} records; best of {a.repeat} (s):")
    for name, v in rows.items():
        print(f"  {name:32s} {min(v):8.3f}   (all: {', '.join(f'{x:.3f}' for x in v)})")


if __name__ == "__main__":
    main()

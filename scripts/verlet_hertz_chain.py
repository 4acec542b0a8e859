#!/usr/bin/env python3
"""Independent check for docs/PHYSICS.md "Long runs: what stays bounded" (issue 22, M5).

A 1-D ring of 80 unit masses with the torus's spacing (L0 = 2r, r = 1.5 sin(pi/80)), an axial
spring K^a = 200 per bond and, on compression, the Hertz law (2/5) K^pp delta^{5/2} with
K^pp = 2100 (gap 0: each bond's rest length is exactly the contact onset, as in the torus),
integrated by plain velocity Verlet, nothing shared with rrpdem. Random initial velocities (one
ensemble member per seed). Prints the mean and standard deviation over the ensemble of the
relative energy error at a few times.

With the Hertz law (P = 1.5) it shows what the torus shows: a spread that grows with t and falls
about as h^{5/2} .. h^3, and a positive mean that falls much faster with h (about h^5). With a law
smoother at the onset (P = 3: force ∝ delta^3, scaled to the same force at delta = 0.03) the same
runs at h = 5e-4 stay bounded (at h = 1e-3 its stiffer deep compressions make it grow as well).

Usage: scripts/verlet_hertz_chain.py H [REALISATIONS=32] [T_END=100] [P=1.5]
Needs numpy. H = 1e-3, T_END = 100, 32 realisations: about 20 s.
"""
import sys

import numpy as np

N = 80
R = 1.5 * np.sin(np.pi / N)
L0 = 2 * R
K_AXIAL = 200.0
K_CONTACT = 2100.0
DELTA_S = 0.03


def forces(x, p):
    """Force on each particle and potential energy per realisation (rows)."""
    length = np.roll(x, -1, axis=1) - x
    length = np.where(length < -N * L0 / 2, length + N * L0, length)  # the ring closes
    strain = length / L0 - 1
    delta = np.maximum(-strain, 0)
    scale = DELTA_S ** (1.5 - p)
    # Tension of bond (i, i+1): positive pulls the two together.
    tension = (K_AXIAL / L0) * strain - (K_CONTACT / L0) * scale * delta**p
    energy = (0.5 * K_AXIAL * strain**2 + K_CONTACT * scale / (p + 1) * delta ** (p + 1)).sum(1)
    return tension - np.roll(tension, 1, axis=1), energy


def main():
    h = float(sys.argv[1])
    reals = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    t_end = float(sys.argv[3]) if len(sys.argv) > 3 else 100.0
    p = float(sys.argv[4]) if len(sys.argv) > 4 else 1.5
    rng = np.random.default_rng(1)
    x = np.tile(np.arange(N) * L0, (reals, 1)).astype(float)
    v = rng.normal(0, 0.7, (reals, N))
    v -= v.mean(1, keepdims=True)
    f, u = forces(x, p)
    e0 = 0.5 * (v * v).sum(1) + u
    marks = {round(t / h): t for t in (1, 3, 10, 30, 100, 300, 1000) if t <= t_end}
    print(f"h = {h:g}, {reals} realisations, force exponent {p}, E0 ≈ {e0.mean():.1f}")
    for k in range(1, round(t_end / h) + 1):
        v += 0.5 * h * f
        x += h * v
        f, u = forces(x, p)
        v += 0.5 * h * f
        if k in marks:
            err = (0.5 * (v * v).sum(1) + u - e0) / e0
            se = err.std(ddof=1) / np.sqrt(reals)
            print(f"  t = {marks[k]:6g}: mean {err.mean():+.3e} (± {se:.1e})  std {err.std(ddof=1):.3e}")


if __name__ == "__main__":
    main()

//! Lattice-filled solid bodies (MODEL §7): `torus_solid` and `block_solid`. Shared here: the
//! fill pipeline (sites → diameters → jitter → orientation and placement → velocities and masses
//! → bonds), the counter-based random numbers, and the cell search for bonds.
//!
//! Everything is O(N) in time and memory, parallel with rayon, and deterministic: every random
//! draw is a function of `(seed, particle index, stream)` (SplitMix64), every reduction is exact
//! (min, integer sums), and every output element is written by one task, so the result does not
//! depend on the number of threads.

pub mod block_solid;
pub mod lattice;
pub mod region;
pub mod torus_solid;

pub use block_solid::BlockSolid;
pub use lattice::{Lattice, LatticeKind};
pub use region::Region;
pub use torus_solid::TorusSolid;

use crate::error::ScenarioError;
use crate::model::Particles;
use crate::scenario::{Scenario, finite, finite_vec, num, positive, unit_direction};
use glam::{DQuat, DVec3};
use rayon::prelude::*;
use std::f64::consts::PI;

/// Particles per task in the parallel bond fill (large enough to amortise the dispatch).
const BLOCK: usize = 4096;

/// Random-number streams of one particle (so that, e.g., adding jitter leaves the diameters be).
const STREAM_POLY: u64 = 0;
const STREAM_JITTER: u64 = 1;

pub use crate::rng::splitmix64;

/// Uniform number in [0, 1) drawn from `(seed, index, stream)`: a counter-based generator, so
/// a draw depends on nothing but its arguments (not on thread count or order).
#[inline]
pub fn uniform(seed: u64, index: u64, stream: u64) -> f64 {
    let h = splitmix64(splitmix64(seed ^ splitmix64(index)).wrapping_add(stream));
    crate::rng::unit(h)
}

/// The bond criterion of MODEL §7: `|x_i − x_j| ≤ (1 + tol)(r_i + r_j)`.
#[inline]
pub fn within_bond_reach(xi: DVec3, xj: DVec3, ri: f64, rj: f64, tol: f64) -> bool {
    (xi - xj).length() <= (1.0 + tol) * (ri + rj)
}

/// Most particles one body may have (the model indexes particles with u32, bonds as 2·index).
pub const MAX_PARTICLES: f64 = (u32::MAX / 4) as f64;

/// Largest extent of a body in particle diameters (keeps lattice and grid coordinates small).
const MAX_SPAN: f64 = (1u64 << 20) as f64;

/// Largest `bond_tolerance`: bonds then reach twice the contact distance (fcc: 54 neighbours
/// within reach instead of 12). Beyond it a bond joins spheres with others between them, and the
/// bond count grows with the cube of the tolerance (1000 gave every pair of a 1 099-sphere block,
/// 19 GB in a minute).
pub const MAX_BOND_TOLERANCE: f64 = 1.0;

pub(crate) fn default_bond_tolerance() -> f64 {
    0.05
}

/// The fields `torus_solid` and `block_solid` share, as given (before validation).
pub(crate) struct SolidFields {
    pub kind: &'static str,
    pub particle_diameter: Option<f64>,
    pub particles: Option<u64>,
    pub lattice: LatticeKind,
    pub jitter: f64,
    pub polydispersity: f64,
    pub seed: u64,
    pub bond_tolerance: f64,
    pub bonded: bool,
    pub center: Option<DVec3>,
    pub gap: f64,
    pub axis: DVec3,
    pub velocity: DVec3,
    pub angular_velocity: DVec3,
    pub mass: Option<f64>,
    pub inertia: Option<f64>,
    pub density: Option<f64>,
}

impl SolidFields {
    /// The fields' ranges and finiteness (errors name `f(name)`).
    fn check_shared(&self, s: &Scenario, f: &dyn Fn(&str) -> String) -> Result<(), ScenarioError> {
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(
                s.invalid(f("jitter"), format!("must be in [0, 1] (a fraction of D_p), got {}", num(self.jitter)))
            );
        }
        if !(0.0..1.0).contains(&self.polydispersity) {
            return Err(s.invalid(
                f("polydispersity"),
                format!("must be in [0, 1) (diameters scaled by [1 − p, 1]), got {}", num(self.polydispersity)),
            ));
        }
        if !(0.0..=MAX_BOND_TOLERANCE).contains(&self.bond_tolerance) {
            return Err(s.invalid(
                f("bond_tolerance"),
                format!(
                    "must be in [0, {MAX_BOND_TOLERANCE}] (bonds reach (1 + tol)(r_i + r_j): at most twice the contact \
                     distance), got {}",
                    num(self.bond_tolerance)
                ),
            ));
        }
        finite(s, &f("gap"), self.gap)?;
        if let Some(c) = self.center {
            finite_vec(s, &f("center"), c)?;
        }
        unit_direction(s, &f("axis"), self.axis)?;
        finite_vec(s, &f("velocity"), self.velocity)?;
        finite_vec(s, &f("angular_velocity"), self.angular_velocity)?;
        Ok(())
    }

    /// Density, or mass and inertia (the scenario's `particle` values by default).
    fn mass_spec(&self, s: &Scenario, f: &dyn Fn(&str) -> String) -> Result<MassSpec, ScenarioError> {
        let mass = match (self.density, self.mass, self.inertia) {
            (Some(rho), None, None) => {
                positive(s, &f("density"), rho)?;
                MassSpec::Density(rho)
            }
            (Some(_), _, _) => {
                return Err(s.invalid(f("density"), "give either `density` or `mass`/`inertia`, not both"));
            }
            (None, m, j) => {
                let mass = m.unwrap_or(s.particle.mass);
                let inertia = j.unwrap_or(s.particle.inertia);
                positive(s, &f("mass"), mass)?;
                positive(s, &f("inertia"), inertia)?;
                MassSpec::Uniform { mass, inertia }
            }
        };
        Ok(mass)
    }

    /// Validates the shared fields (errors name `field.<name>`) and resolves the particle
    /// diameter: given, solved from `particles`, or `particle.diameter`. `dp_max` is the body's
    /// thickness (a sphere must fit), named by `thickness_field` in errors.
    pub(crate) fn resolve(
        &self,
        s: &Scenario,
        field: &str,
        region: Region,
        dp_max: f64,
        thickness_field: &str,
    ) -> Result<Fill, ScenarioError> {
        let f = |name: &str| format!("{field}.{name}");
        self.check_shared(s, &f)?;
        let mass = self.mass_spec(s, &f)?;
        let dp = match (self.particle_diameter, self.particles) {
            (Some(_), Some(_)) => {
                return Err(s.invalid(field, "give either `particle_diameter` or `particles`, not both"));
            }
            (Some(dp), None) => {
                positive(s, &f("particle_diameter"), dp)?;
                dp
            }
            (None, Some(n)) => {
                if n == 0 || n as f64 > MAX_PARTICLES {
                    return Err(s.invalid(f("particles"), format!("must be in 1..={MAX_PARTICLES}, got {n}")));
                }
                // The solve counts the lattice row by row: it must not try diameters for which
                // the body spans more than MAX_SPAN of them (rows beyond memory; found by
                // tests/fuzz_parsers.rs: a torus of D_t 2^31 and D_c 1 took 8 GB).
                let dp_min = region.half_extent().max_element() / MAX_SPAN;
                if dp_min >= dp_max || estimate(self.lattice, &region, dp_min) < n as f64 {
                    return Err(s.invalid(
                        f("particles"),
                        format!(
                            "{n} particles need spheres smaller than {}, and the body would span more than 2^20 of \
                             them; give fewer particles or a more compact body",
                            num(dp_min)
                        ),
                    ));
                }
                solve_diameter(self.lattice, &region, n, dp_max, dp_min)
            }
            (None, None) => s.particle.diameter.ok_or_else(|| {
                s.invalid(field, "missing `particle_diameter` or `particles` (or `particle.diameter`)")
            })?,
        };
        let dp_field = if self.particle_diameter.is_some() { f("particle_diameter") } else { f("particles") };
        if dp >= dp_max {
            return Err(s.invalid(
                f(thickness_field),
                format!("must exceed the particle diameter D_p = {} (a sphere must fit inside)", num(dp)),
            ));
        }
        if region.half_extent().max_element() / dp > MAX_SPAN {
            return Err(s.invalid(
                dp_field,
                format!("the body spans more than 2^20 particle diameters (D_p = {}); use larger particles", num(dp)),
            ));
        }
        let est = estimate(self.lattice, &region, dp);
        if est > MAX_PARTICLES {
            return Err(s.invalid(
                dp_field,
                format!("about {est:.3e} particles would be generated (D_p = {}); at most {MAX_PARTICLES}", num(dp)),
            ));
        }
        Ok(Fill {
            kind: self.kind,
            region,
            lattice: self.lattice,
            dp,
            jitter: self.jitter,
            polydispersity: self.polydispersity,
            seed: self.seed,
            bond_tolerance: self.bond_tolerance,
            bonded: self.bonded,
            center: self.center,
            gap: self.gap,
            axis: self.axis,
            velocity: self.velocity,
            angular_velocity: self.angular_velocity,
            mass,
        })
    }
}

/// How a solid body's particles get their mass and moment of inertia.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum MassSpec {
    Uniform {
        mass: f64,
        inertia: f64,
    },
    /// `m = ρ π D³/6`, `J = m D²/10`, each particle with its own diameter.
    Density(f64),
}

/// A solid body, resolved and validated, ready to be filled.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fill {
    pub kind: &'static str,
    pub region: Region,
    pub lattice: LatticeKind,
    pub dp: f64,
    pub jitter: f64,
    pub polydispersity: f64,
    pub seed: u64,
    pub bond_tolerance: f64,
    pub bonded: bool,
    pub center: Option<DVec3>,
    pub gap: f64,
    pub axis: DVec3,
    pub velocity: DVec3,
    pub angular_velocity: DVec3,
    pub mass: MassSpec,
}

/// What a solid body resolved to (for reports and tests).
#[derive(Clone, Debug, PartialEq)]
pub struct SolidInfo {
    /// `torus_solid` or `block_solid`.
    pub kind: &'static str,
    pub lattice: LatticeKind,
    pub region: Region,
    /// Nominal particle diameter D_p (given, or solved from a particle count).
    pub particle_diameter: f64,
    /// Centre of the body (placed, or the default touching the plane x = gap).
    pub center: DVec3,
    /// Local axes in global coordinates: `local_to_global · p_local + center = x`.
    pub frame: [DVec3; 3],
    pub bond_tolerance: f64,
    /// MODEL §7's estimate of the count: site density × volume the centres may occupy.
    pub estimate: f64,
    /// Jitter proposals rejected (overlap or leaving the body).
    pub jitter_rejected: usize,
}

impl SolidInfo {
    /// A global position in the body's local frame.
    pub fn to_local(&self, x: DVec3) -> DVec3 {
        let d = x - self.center;
        DVec3::new(self.frame[0].dot(d), self.frame[1].dot(d), self.frame[2].dot(d))
    }
}

/// A generated body: particles (valid by construction) and bonds `(i, j)`, `i < j`, sorted,
/// without duplicates by construction.
pub(crate) struct Generated {
    pub particles: Particles,
    pub bonds: Vec<(u32, u32)>,
    pub solid: SolidInfo,
}

/// Local frame of a body with symmetry axis `axis`: the torus_ring convention, (x, y, z) for z.
pub(crate) fn frame(axis: DVec3) -> [DVec3; 3] {
    let e3 = axis.normalize();
    let e1 = if e3.abs_diff_eq(DVec3::Z, 1e-12) { DVec3::X } else { e3.any_orthonormal_vector() };
    [e1, e3.cross(e1), e3]
}

/// MODEL §7's estimate of the particle count for diameter `dp`.
pub(crate) fn estimate(kind: LatticeKind, region: &Region, dp: f64) -> f64 {
    kind.site_density(dp) * region.centre_volume(dp)
}

/// The diameter whose lattice fill is closest to `target` particles, for diameters below
/// `dp_max`: the estimate's root by bisection, then a bisection on the true site count (each
/// count is O(rows), see `Lattice::count`). Deterministic.
/// `dp_min` bounds every diameter tried from below (the lattice is counted row by row).
pub(crate) fn solve_diameter(kind: LatticeKind, region: &Region, target: u64, dp_max: f64, dp_min: f64) -> f64 {
    let n = target as f64;
    // The estimate falls monotonically from +∞ (dp → 0) to 0 (dp = dp_max): bisect in log dp.
    let (mut lo, mut hi) = ((dp_max * 1e-12).max(dp_min), dp_max);
    for _ in 0..200 {
        let mid = (lo * hi).sqrt();
        if estimate(kind, region, mid) > n {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let dp0 = (lo * hi).sqrt();
    let count = |dp: f64| Lattice::new(kind, dp).count(region);
    let mut best = (count(dp0).abs_diff(target), dp0);
    // The first diameter seen with the smallest miss wins (a fixed sequence: deterministic).
    let better =
        |best: (u64, f64), c: u64, dp: f64| if c.abs_diff(target) < best.0 { (c.abs_diff(target), dp) } else { best };
    let (mut lo, mut hi) = (dp0, dp0);
    // Bracket: count(lo) ≥ target ≥ count(hi) (the count falls with dp, up to lattice steps).
    for _ in 0..20 {
        let c = count(lo);
        best = better(best, c, lo);
        if c >= target || lo * 0.95 < dp_min {
            break;
        }
        lo *= 0.95;
    }
    for _ in 0..20 {
        let c = count(hi);
        best = better(best, c, hi);
        if c <= target || hi * 1.05 >= dp_max {
            break;
        }
        hi *= 1.05;
    }
    for _ in 0..40 {
        let mid = 0.5 * (lo + hi);
        let c = count(mid);
        best = better(best, c, mid);
        if c == target {
            break;
        }
        if c > target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    best.1
}

/// Candidate neighbours of a particle: calls `f(j)` for a superset of the particles within some
/// distance of particle `i`.
type Candidates<'a> = dyn Fn(usize, &mut dyn FnMut(usize)) + Sync + 'a;

/// Fills a solid body: the whole generation pipeline.
///
/// Neighbours (for the jitter's overlap checks and for the bonds) come from the lattice, not a
/// cell grid: every particle started at a site and moved at most `jitter·D_p`, so all particles
/// within a distance d of it started at sites within `d + 2·jitter·D_p`, a fixed stencil of
/// integer offsets looked up in O(1) through the site index. The candidates are then filtered
/// with the exact criterion, so the result is what an all-pairs search gives.
pub(crate) fn fill(f: &Fill) -> Generated {
    let lattice = Lattice::new(f.lattice, f.dp);
    let region = f.region;
    let (sites, index) = lattice.sites(&region);
    let n = sites.len();
    let mut p: Vec<DVec3> = sites.par_iter().map(|s| lattice.position(s.i, s.j, s.k)).collect();
    let mut particle_of_site = vec![0u32; n];
    for (k, s) in sites.iter().enumerate() {
        particle_of_site[s.r as usize] = k as u32;
    }
    let max_move = f.jitter * f.dp;
    let within = |reach: f64| {
        // HCP's stencil depends on the layer's parity; for FCC and SC both entries are equal.
        let stencils = [lattice.stencil(0, reach), lattice.stencil(1, reach)];
        let (sites, index, particle_of_site) = (&sites, &index, &particle_of_site);
        move |i: usize, f: &mut dyn FnMut(usize)| {
            let s = sites[i];
            for o in &stencils[s.k.rem_euclid(2) as usize] {
                if let Some(r) = index.find(s.i + o[0], s.j + o[1], s.k + o[2]) {
                    f(particle_of_site[r as usize] as usize);
                }
            }
        }
    };

    // Polydispersity shrinks (never grows) a sphere, so no overlap and no sphere leaving the body
    // can come from it.
    let diameter: Vec<f64> = if f.polydispersity > 0.0 {
        (0..n)
            .into_par_iter()
            .map(|i| f.dp * (1.0 - f.polydispersity * uniform(f.seed, i as u64, STREAM_POLY)))
            .collect()
    } else {
        vec![f.dp; n]
    };
    let radius: Vec<f64> = diameter.par_iter().map(|d| 0.5 * d).collect();
    drop(diameter);

    // Contacts need r_i + r_j ≤ D_p; both ends may move by max_move. The relative slack covers
    // the round-off of lattice positions.
    let jitter_rejected = if f.jitter > 0.0 {
        jitter(&mut p, &radius, &region, f, &within((f.dp + 2.0 * max_move) * (1.0 + 1e-9)))
    } else {
        0
    };

    let axes = frame(f.axis);
    let g: Vec<DVec3> = p.par_iter().map(|q| axes[0] * q.x + axes[1] * q.y + axes[2] * q.z).collect();
    drop(p);
    // Default placement: the leftmost sphere touches the plane x = gap (a wall at x = 0 with a
    // gap), the centre on the x axis. For the torus in the x–y plane this is
    // (D_t/2 + D_c/2 + gap, 0, 0) less the lattice's distance from the tube surface there.
    let center = f.center.unwrap_or_else(|| {
        let left = g.par_iter().zip(&radius).map(|(g, r)| g.x - r).reduce(|| f64::INFINITY, f64::min);
        DVec3::new(f.gap - if left.is_finite() { left } else { 0.0 }, 0.0, 0.0)
    });
    let x: Vec<DVec3> = g.par_iter().map(|g| center + *g).collect();
    let (v0, w0) = (f.velocity, f.angular_velocity);
    let v: Vec<DVec3> = g.par_iter().map(|g| v0 + w0.cross(*g)).collect();
    drop(g);
    let (mass, inertia): (Vec<f64>, Vec<f64>) = match f.mass {
        MassSpec::Uniform { mass, inertia } => (vec![mass; n], vec![inertia; n]),
        MassSpec::Density(rho) => radius
            .par_iter()
            .map(|r| {
                let d = 2.0 * r;
                let m = rho * PI * d * d * d / 6.0;
                (m, m * d * d / 10.0)
            })
            .unzip(),
    };
    // Bonds need |x_i − x_j| ≤ (1 + tol)(r_i + r_j) ≤ (1 + tol) D_p. The slack covers the
    // round-off of the lattice positions (relative) and of the placement (absolute, from the
    // size of the coordinates).
    let bonds = if f.bonded {
        let reach = ((1.0 + f.bond_tolerance) * f.dp + 2.0 * max_move) * (1.0 + 1e-9)
            + 1e-14 * (center.length() + region.half_extent().length());
        bond_pairs(&x, &radius, f.bond_tolerance, &within(reach))
    } else {
        Vec::new()
    };
    drop((sites, index, particle_of_site));
    let particles =
        Particles { x, v, q: vec![DQuat::IDENTITY; n], w: vec![w0; n], mass, inertia, radius, fixed: vec![false; n] };
    Generated {
        particles,
        bonds,
        solid: SolidInfo {
            kind: f.kind,
            lattice: f.lattice,
            region,
            particle_diameter: f.dp,
            center,
            frame: axes,
            bond_tolerance: f.bond_tolerance,
            estimate: estimate(f.lattice, &region, f.dp),
            jitter_rejected,
        },
    }
}

/// Displaces every particle by a random vector uniform in the ball of radius `jitter·D_p`,
/// unless the displaced sphere would leave the body or overlap a neighbour. A proposal is checked
/// against both the current and the proposed position of every neighbour, so whichever of the
/// neighbour's proposals is accepted, no overlap results: the decision of each particle is
/// independent of the others' and of the order. Returns the number of rejected proposals.
fn jitter(p: &mut [DVec3], radius: &[f64], region: &Region, f: &Fill, near: &Candidates) -> usize {
    let reach = f.jitter * f.dp;
    let proposal: Vec<DVec3> = (0..p.len())
        .into_par_iter()
        .map(|i| {
            let u = |k: u64| uniform(f.seed, i as u64, STREAM_JITTER + k);
            // Box–Muller normals give an isotropic direction; u^(1/3) a uniform radius in the ball.
            let (r1, r2) = ((-2.0 * (1.0 - u(0)).ln()).sqrt(), (-2.0 * (1.0 - u(2)).ln()).sqrt());
            let (a1, a2) = (2.0 * PI * u(1), 2.0 * PI * u(3));
            let n = DVec3::new(r1 * a1.cos(), r1 * a1.sin(), r2 * a2.cos());
            let len = n.length();
            if len > 0.0 { n * (reach * u(4).cbrt() / len) } else { DVec3::ZERO }
        })
        .collect();
    let pos: &[DVec3] = p;
    let accepted: Vec<bool> = (0..p.len())
        .into_par_iter()
        .map(|i| {
            let q = pos[i] + proposal[i];
            if region.depth(q) < radius[i] {
                return false;
            }
            let mut ok = true;
            near(i, &mut |j| {
                let contact = radius[i] + radius[j];
                if (q - pos[j]).length() < contact || (q - (pos[j] + proposal[j])).length() < contact {
                    ok = false;
                }
            });
            ok
        })
        .collect();
    p.par_iter_mut().zip(&proposal).zip(&accepted).for_each(|((x, d), &ok)| {
        if ok {
            *x += *d;
        }
    });
    accepted.iter().filter(|&&a| !a).count()
}

/// Every pair within bond reach (`within_bond_reach`) among the candidates, as `(i, j)` with
/// `i < j`, sorted. Counted first, then filled into one exact-size vector in parallel blocks, so
/// the peak memory is the bond list itself.
fn bond_pairs(x: &[DVec3], radius: &[f64], tol: f64, near: &Candidates) -> Vec<(u32, u32)> {
    let n = x.len();
    let partners = |i: usize, f: &mut dyn FnMut(u32)| {
        near(i, &mut |j| {
            if j > i && within_bond_reach(x[i], x[j], radius[i], radius[j], tol) {
                f(j as u32);
            }
        });
    };
    let block_counts: Vec<usize> = (0..n.div_ceil(BLOCK))
        .into_par_iter()
        .map(|b| {
            let mut c = 0;
            for i in b * BLOCK..((b + 1) * BLOCK).min(n) {
                partners(i, &mut |_| c += 1);
            }
            c
        })
        .collect();
    let total: usize = block_counts.iter().sum();
    let mut pairs = vec![(0u32, 0u32); total];
    let mut slices = Vec::with_capacity(block_counts.len());
    let mut rest: &mut [(u32, u32)] = &mut pairs;
    for (b, &c) in block_counts.iter().enumerate() {
        let (head, tail) = rest.split_at_mut(c);
        slices.push((b, head));
        rest = tail;
    }
    slices.into_par_iter().for_each(|(b, out)| {
        let mut k = 0;
        for i in b * BLOCK..((b + 1) * BLOCK).min(n) {
            let start = k;
            partners(i, &mut |j| {
                out[k] = (i as u32, j);
                k += 1;
            });
            out[start..k].sort_unstable();
        }
    });
    pairs
}

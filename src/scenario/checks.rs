//! Checks of a scenario's resolved particles and bonds (those given explicitly; generated ones
//! are valid by construction) and of the whole model: coincident particles, starting overlaps
//! with walls; and the bodies' own fields when the scenario is read. Each check finds the first
//! fault (lowest index) in parallel and formats a field name only for it, so millions of
//! particles cost little.

use super::{Body, PAR_MIN, RawParticle, Scenario, num, vec3};
use crate::error::ScenarioError;
use crate::model::Particles;
use rayon::prelude::*;

impl Scenario {
    /// The bodies: at least one; a pendulum body with its field; a particle list not empty; a
    /// generated body's own fields that cost nothing to check (a ring's count, a solid's
    /// shape), so that a wrong one is named when the scenario is read, not first when it is built.
    pub(super) fn validate_bodies(&self) -> Result<(), ScenarioError> {
        if self.bodies.is_empty() {
            return Err(self.invalid("bodies", "must list at least one body"));
        }
        for (b, body) in self.bodies.iter().enumerate() {
            match body {
                Body::Pendulum(_) if self.pendulum.is_none() => {
                    return Err(self.invalid(
                        format!("bodies[{b}]"),
                        "a `pendulum` body needs the top-level `pendulum` field ({\"g\": …, \"rho0\": […], \"up\": […]}): \
                         without it the body only spins freely",
                    ));
                }
                Body::Particles(l) if l.particles.is_empty() => {
                    return Err(
                        self.invalid(format!("bodies[{b}].particles"), "is empty: a body needs at least one particle")
                    );
                }
                Body::TorusRing(t) => self.ring_count(t, &format!("bodies[{b}]"))?,
                // (Not the solids' particle count: solving for their diameter counts the
                // lattice, a second at 10⁸ spheres; building does it.)
                Body::TorusSolid(t) => t.check_shape(self, &format!("bodies[{b}]"))?,
                Body::BlockSolid(t) => t.check_shape(self, &format!("bodies[{b}]"))?,
                _ => {}
            }
        }
        Ok(())
    }

    /// `neighbour_skin`: in (0, `grid::MAX_SKIN_FACTOR`] where given.
    pub(super) fn check_skin(&self) -> Result<(), ScenarioError> {
        let max = crate::grid::MAX_SKIN_FACTOR;
        match self.neighbour_skin {
            Some(skin) if !(skin.is_finite() && skin > 0.0 && skin <= max) => Err(self.invalid(
                "neighbour_skin",
                format!(
                    "must be a number in (0, {}] (units of the largest particle radius; {} when left out), got {}",
                    num(max),
                    num(crate::grid::SKIN_FACTOR),
                    num(skin)
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Refuses two particles at the same place (bonded or not): their contact has no direction
    /// and would turn the first force evaluation into NaN. Linear: a cell search.
    pub(super) fn check_coincident(&self, p: &Particles, body_starts: &[usize]) -> Result<(), ScenarioError> {
        let n = p.len();
        if n < 2 {
            return Ok(());
        }
        let r_max = p.radius.iter().copied().fold(0.0, f64::max);
        let mut grid = crate::grid::CellGrid::new(n, 2.0 * r_max);
        // Positions were checked finite; one too far for the grid is left to the engines' range check.
        if grid.build(|i| p.x[i]).is_err() {
            return Ok(());
        }
        // A clump's own spheres never touch (MODEL §12), so they may share a place.
        let same_clump = |i: usize, j: usize| {
            let (b, _) = body_of(body_starts, i);
            b == body_of(body_starts, j).0 && self.is_clump(b)
        };
        let coincident = |i: usize| {
            let mut hit = None;
            grid.for_each_neighbour(i, |j| {
                // Within 1e-9 of the radii: a contact direction from such a difference is noise.
                if j > i
                    && hit.is_none()
                    && (p.x[i] - p.x[j]).length() <= 1e-9 * (p.radius[i] + p.radius[j])
                    && !same_clump(i, j)
                {
                    hit = Some(j);
                }
            });
            hit.map(|j| (i, j))
        };
        let found = (0..n).into_par_iter().with_min_len(4096).filter_map(coincident).min();
        if let Some((i, j)) = found {
            let name = |k: usize| self.particle_name(body_starts, k);
            return Err(self.invalid(
                name(i),
                format!(
                    "particle {i} ({}) and particle {j} ({}) are at the same position {}",
                    name(i),
                    name(j),
                    vec3(p.x[i])
                ),
            ));
        }
        Ok(())
    }

    /// Refuses a particle whose kinetic energy `½ m |v|² + ½ J |Ω|²` is not a finite f64 (a
    /// speed near 1e154 or above, finite itself): the run's energy would start infinite, the
    /// stability estimate's impact terms overflow (and drop out), and the first step end in a
    /// NaN. The terms are ≥ 0, so a finite sum clears every particle; otherwise the first
    /// particle whose own energy is not finite is named, or, if none, the sum.
    pub(super) fn check_motion(&self, p: &Particles, body_starts: &[usize]) -> Result<(), ScenarioError> {
        let energy =
            |i: usize| 0.5 * p.mass[i] * p.v[i].length_squared() + 0.5 * p.inertia[i] * p.w[i].length_squared();
        let total: f64 = (0..p.len()).into_par_iter().with_min_len(PAR_MIN).map(energy).sum();
        if total.is_finite() {
            return Ok(());
        }
        let what = "speeds this large are beyond f64 (is the velocity in the scenario's units?)";
        let Some(i) = (0..p.len()).find(|&i| !energy(i).is_finite()) else {
            return Err(self.invalid("bodies", format!("the particles' kinetic energy sums to {total}: {what}")));
        };
        Err(self.invalid(
            self.particle_name(body_starts, i),
            format!(
                "particle {i} starts with a kinetic energy ½ m |v|² + ½ J |Ω|² that is not finite (v = {}, Ω = {}, m = \
                 {}, J = {}): {what}",
                vec3(p.v[i]),
                vec3(p.w[i]),
                num(p.mass[i]),
                num(p.inertia[i])
            ),
        ))
    }

    /// Refuses a particle that starts overlapping a wall by more than `MAX_WALL_OVERLAP` of its
    /// radius: a body placed behind a wall (or a wall whose normal points the wrong way) would
    /// start with an enormous contact energy and be flung off. Names the particle and the wall.
    pub(super) fn check_walls(&self, p: &Particles, body_starts: &[usize]) -> Result<(), ScenarioError> {
        if self.walls.is_empty() {
            return Ok(());
        }
        let walls: Vec<(glam::DVec3, glam::DVec3)> =
            self.walls.iter().map(|w| (w.point, w.normal.normalize())).collect();
        let fault = |i: usize| {
            let r = p.radius[i];
            walls.iter().enumerate().find_map(|(w, (point, normal))| {
                let overlap = 1.0 - (p.x[i] - *point).dot(*normal) / r;
                (overlap > MAX_WALL_OVERLAP).then_some((w, overlap))
            })
        };
        let first = if p.len() < PAR_MIN {
            (0..p.len()).find_map(|i| fault(i).map(|f| (i, f)))
        } else {
            (0..p.len()).into_par_iter().find_map_first(|i| fault(i).map(|f| (i, f)))
        };
        let Some((i, (w, overlap))) = first else { return Ok(()) };
        Err(self.invalid(
            self.particle_name(body_starts, i),
            format!(
                "particle {i} overlaps walls[{w}] by {:.1} % of its radius at t = 0: its centre is {:.2} radii behind \
                 the wall's plane (at most {:.0} %, the centre on the plane, is accepted); is the body on the wrong \
                 side of the wall, or the wall's normal reversed (it points into the domain)?",
                100.0 * overlap,
                overlap - 1.0,
                100.0 * MAX_WALL_OVERLAP
            ),
        ))
    }

    /// The first particle (lowest index) with a non-finite or non-positive value, or an
    /// attitude that is not a unit quaternion, is an error naming it and the field.
    pub(super) fn check_particles(&self, raw: &[RawParticle], field: &str) -> Result<(), ScenarioError> {
        let fault = |p: &RawParticle| -> Option<(&'static str, String)> {
            let vec = |v: glam::DVec3| (!v.is_finite()).then(|| format!("must be a finite vector, got {}", vec3(v)));
            let pos =
                |v: f64| (!(v.is_finite() && v > 0.0)).then(|| format!("must be a finite number > 0, got {}", num(v)));
            vec(p.x)
                .map(|m| ("x", m))
                .or_else(|| vec(p.v).map(|m| ("v", m)))
                .or_else(|| vec(p.w).map(|m| ("omega", m)))
                .or_else(|| pos(p.mass).map(|m| ("mass", m)))
                .or_else(|| pos(p.inertia).map(|m| ("inertia", m)))
                .or_else(|| pos(p.diameter).map(|m| ("diameter", m)))
                .or_else(|| {
                    (!p.q.is_finite() || (p.q.length() - 1.0).abs() > 1e-6)
                        .then(|| ("q", format!("attitude must be a finite unit quaternion, got {:?}", p.q)))
                })
        };
        let bad = if raw.len() < PAR_MIN {
            raw.iter().position(|p| fault(p).is_some())
        } else {
            raw.par_iter().position_first(|p| fault(p).is_some())
        };
        match bad.and_then(|k| fault(&raw[k]).map(|f| (k, f))) {
            Some((k, (name, message))) => Err(self.invalid(format!("{field}.particles[{k}].{name}"), message)),
            None => Ok(()),
        }
    }

    /// Bonds given explicitly: the first bad one (lowest index) is an error naming it — a
    /// missing particle, a particle bonded to itself, a bond listed twice (found by sorting the
    /// pairs, not a hash set), or two coincident particles. Same order of checks per bond as
    /// reading them one by one.
    pub(super) fn check_bonds(
        &self,
        raw: &[RawParticle],
        bonds: &[(u32, u32)],
        field: &str,
    ) -> Result<(), ScenarioError> {
        let n = raw.len();
        // Distance over the sum of the radii (the bond's length in contact distances).
        let stretch = |i: u32, j: u32| {
            let (a, b) = (&raw[i as usize], &raw[j as usize]);
            (a.x - b.x).length() / (0.5 * (a.diameter + b.diameter))
        };
        // Index-local faults, in the order they are reported for one bond; the duplicate check
        // comes between `itself` (1) and `coincident` (2), then comes `too long` (4).
        let fault = |&(i, j): &(u32, u32)| -> Option<u8> {
            if i as usize >= n || j as usize >= n {
                Some(0)
            } else if i == j {
                Some(1)
            } else if (raw[i as usize].x - raw[j as usize].x).length().partial_cmp(&0.0)
                != Some(std::cmp::Ordering::Greater)
            {
                Some(2)
            } else if stretch(i, j) > MAX_BOND_REACH {
                Some(4)
            } else {
                None
            }
        };
        let first_fault = if bonds.len() < PAR_MIN {
            bonds.iter().position(|b| fault(b).is_some())
        } else {
            bonds.par_iter().position_first(|b| fault(b).is_some())
        };
        // A bond is a duplicate when an earlier bond joins the same two particles.
        let mut keyed: Vec<(u32, u32, u32)> =
            bonds.iter().enumerate().map(|(k, &(i, j))| (i.min(j), i.max(j), k as u32)).collect();
        keyed.par_sort_unstable();
        let first_dup =
            keyed.windows(2).filter(|w| (w[0].0, w[0].1) == (w[1].0, w[1].1)).map(|w| w[1].2 as usize).min();
        drop(keyed);
        let (k, what) = match (first_fault, first_dup) {
            (None, None) => return Ok(()),
            (Some(k), None) => (k, fault(&bonds[k]).unwrap_or(0)),
            (None, Some(d)) => (d, 3),
            (Some(k), Some(d)) => {
                let f = fault(&bonds[k]).unwrap_or(0);
                if d < k || (d == k && f >= 2) { (d, 3) } else { (k, f) }
            }
        };
        let (i, j) = bonds[k];
        let message = match what {
            0 => format!(
                "particle {} does not exist (this body has {n} particles, indices from 0)",
                if i as usize >= n { i } else { j }
            ),
            1 => format!("bond joins particle {i} to itself"),
            2 => format!("particles {i} and {j} are at the same position: a bond needs a direction"),
            4 => format!(
                "particles {i} and {j} are {} apart, {} times the sum of their radii; a bond joins particles at most \
                 {MAX_BOND_REACH} (r_i + r_j) apart (is an index wrong?)",
                num((raw[i as usize].x - raw[j as usize].x).length()),
                num((stretch(i, j) * 100.0).round() / 100.0)
            ),
            _ => format!("duplicate bond between particles {i} and {j}"),
        };
        Err(self.invalid(format!("{field}.bonds[{k}]"), message))
    }
}

/// A bond given explicitly may join particles at most this many times the sum of their radii
/// apart: twice the contact distance, the reach of the largest `bond_tolerance` (1). A longer
/// one is almost surely a wrong index, and would pull its ends together from afar.
pub const MAX_BOND_REACH: f64 = 2.0;

/// Largest starting overlap of a particle with a wall, as a fraction of its radius: 1, the
/// centre on the wall's plane. A sphere whose centre starts behind the plane was placed on the
/// wrong side (or the wall's normal points the wrong way); a smaller overlap may be meant (a
/// body pressed against the wall), and the stability estimate accounts for it.
pub const MAX_WALL_OVERLAP: f64 = 1.0;

/// The body of the model's particle `i`, and its index in that body, given each body's first
/// particle.
fn body_of(body_starts: &[usize], i: usize) -> (usize, usize) {
    let b = body_starts.partition_point(|&s| s <= i).saturating_sub(1);
    (b, i - body_starts.get(b).copied().unwrap_or(0))
}

impl Scenario {
    /// `bodies[b].particles[k]` for the model's particle `i` (`bodies[b].spheres[k]` in a
    /// clump), given each body's first particle.
    pub(super) fn particle_name(&self, body_starts: &[usize], i: usize) -> String {
        let (b, k) = body_of(body_starts, i);
        let list = if self.is_clump(b) { "spheres" } else { "particles" };
        format!("bodies[{b}].{list}[{k}]")
    }

    fn is_clump(&self, b: usize) -> bool {
        matches!(self.bodies.get(b), Some(super::Body::Clump(_)))
    }
}

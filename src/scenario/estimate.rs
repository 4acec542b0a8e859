//! The size of a scenario's model without building it: particles from each body's closed form
//! (a ring's `n`, a list's length, a lattice's exact site count, a CSV file's rows), bonds per
//! particle from the lattice's neighbour shells within the bond reach, contact partners from the
//! shells within the contact lists' reach. `run --dry-run` and `generate` report it for models
//! too large to build just to be measured; `build_geometry` checks it before allocating, so that
//! a typo such as `n: 2e9` is an error rather than an allocation failure.

use super::generators::{self, Lattice, MAX_PARTICLES};
use super::{Body, Scenario};
use crate::error::ScenarioError;
use std::path::Path;

/// Most bonds a model may have: the engines index bond ends as `2·bond + end` in a u32.
pub const MAX_BONDS: f64 = (u32::MAX / 2) as f64;

/// Contact partners per particle assumed where no lattice says (explicit lists, CSV files): the
/// kissing number of equal spheres, the most that can touch one.
const KISSING: f64 = 12.0;

/// One body's size.
#[derive(Clone, Debug, PartialEq)]
pub struct BodySize {
    pub kind: &'static str,
    pub particles: f64,
    /// Exactly this many (a closed form or a list), or at most (a lattice's interior
    /// coordination counted for every particle).
    pub bonds: f64,
    /// Whether both counts are exact.
    pub exact: bool,
    /// Contact-list partners per particle at t = 0 (the lattice's shells within the lists'
    /// reach; `KISSING` where unknown).
    pub partners: f64,
}

/// A model's size, body by body.
#[derive(Clone, Debug, PartialEq)]
pub struct SizeEstimate {
    pub bodies: Vec<BodySize>,
    pub particles: f64,
    pub bonds: f64,
    pub exact: bool,
}

impl SizeEstimate {
    /// Mean contact partners per particle, weighted by the bodies' particle counts.
    pub fn partners(&self) -> f64 {
        let w: f64 = self.bodies.iter().map(|b| b.particles * b.partners).sum();
        if self.particles > 0.0 { w / self.particles } else { 0.0 }
    }

    /// Bytes of the `Model` (`generate::memory_estimate` derives the figures) plus the bond pairs
    /// held while it is made: what building it takes at least (so above the `model` figure of
    /// `--dry-run` by 8 B per bond).
    pub fn model_bytes(&self) -> f64 {
        self.particles * 129.0 + self.bonds * (104.0 + 8.0)
    }
}

impl Scenario {
    /// The model's size from the bodies' closed forms; builds nothing (a lattice is counted row
    /// by row, a CSV file's rows are counted or, above 64 MB, estimated from its first rows).
    /// Validates each body's fields as building it would.
    pub fn size_estimate(&self) -> Result<SizeEstimate, ScenarioError> {
        let mut bodies = Vec::with_capacity(self.bodies.len());
        let skin = self.neighbour_skin.unwrap_or(crate::grid::SKIN_FACTOR);
        for (b, body) in self.bodies.iter().enumerate() {
            let field = format!("bodies[{b}]");
            let size = match body {
                Body::TorusRing(t) => {
                    self.ring_count(t, &field)?;
                    let n = t.n as f64;
                    BodySize {
                        kind: "torus_ring",
                        particles: n,
                        bonds: if t.bonded { n } else { 0.0 },
                        exact: true,
                        partners: 2.0,
                    }
                }
                Body::Pendulum(_) => {
                    BodySize { kind: "pendulum", particles: 1.0, bonds: 0.0, exact: true, partners: 0.0 }
                }
                Body::Particles(l) => BodySize {
                    kind: "particles",
                    particles: l.particles.len() as f64,
                    bonds: l.bonds.len() as f64,
                    exact: true,
                    partners: KISSING.min(l.particles.len().saturating_sub(1) as f64),
                },
                Body::Csv(c) => {
                    let dir = self.source.parent().unwrap_or(Path::new("."));
                    let (particles, exact_p) = csv_rows(&dir.join(&c.particles))?;
                    let (bonds, exact_b) = match &c.bonds {
                        Some(f) => csv_rows(&dir.join(f))?,
                        None => (0.0, true),
                    };
                    BodySize { kind: "csv", particles, bonds, exact: exact_p && exact_b, partners: KISSING }
                }
                Body::Clump(c) => BodySize {
                    kind: "clump",
                    particles: c.spheres.len() as f64,
                    bonds: 0.0,
                    exact: true,
                    partners: KISSING.min(c.spheres.len().saturating_sub(1) as f64),
                },
                Body::TorusSolid(t) => solid(&t.resolve(self, &field)?, skin),
                Body::BlockSolid(s) => solid(&s.resolve(self, &field)?, skin),
            };
            bodies.push(size);
        }
        let particles = bodies.iter().map(|b| b.particles).sum();
        let bonds = bodies.iter().map(|b| b.bonds).sum();
        let exact = bodies.iter().all(|b| b.exact);
        Ok(SizeEstimate { bodies, particles, bonds, exact })
    }

    /// Refuses a model whose size the engines cannot index, or whose model alone would not fit
    /// in this machine's memory (physical plus swap; Linux): an error naming the sizes instead
    /// of an allocation failure part-way through building it.
    pub fn check_size(&self, size: &SizeEstimate) -> Result<(), ScenarioError> {
        if size.particles > MAX_PARTICLES {
            return Err(self.invalid(
                "bodies",
                format!("{:.3e} particles in all; at most {MAX_PARTICLES:.3e} are allowed", size.particles),
            ));
        }
        if size.bonds > MAX_BONDS {
            return Err(self.invalid(
                "bodies",
                format!(
                    "{} {:.3e} bonds in all; at most {MAX_BONDS:.3e} are allowed",
                    if size.exact { "" } else { "up to" },
                    size.bonds
                ),
            ));
        }
        if let Some(total) = memory_total()
            && size.model_bytes() > total as f64
        {
            return Err(self.invalid(
                "bodies",
                format!(
                    "the model ({:.3e} particles, {}{:.3e} bonds) needs about {:.1} GB just to be built (the model's \
                     {:.1} GB and its bonds' ends while they are found, 8 B each); this machine has {:.1} GB of memory \
                     and swap (`rrpdem run --dry-run` estimates what a run needs)",
                    size.particles,
                    if size.exact { "" } else { "up to " },
                    size.bonds,
                    size.model_bytes() / 1e9,
                    (size.model_bytes() - 8.0 * size.bonds) / 1e9,
                    total as f64 / 1e9
                ),
            ));
        }
        Ok(())
    }
}

/// A lattice body: its exact site count, and bonds and partners from the shells of an interior
/// site. Bonds join sites within `(1 + tol)·D_p` (plus twice the jitter); surface sites have
/// fewer neighbours, so `N·z/2` bounds the count from above.
fn solid(fill: &generators::Fill, skin: f64) -> BodySize {
    let lattice = Lattice::new(fill.lattice, fill.dp);
    let n = lattice.count(&fill.region) as f64;
    let moved = 2.0 * fill.jitter * fill.dp;
    // HCP's shells depend on the layer's parity: the larger of the two.
    let shell = |reach: f64| {
        let r = reach * (1.0 + 1e-9);
        lattice.stencil(0, r).len().max(lattice.stencil(1, r).len()) as f64
    };
    let z = if fill.bonded { shell((1.0 + fill.bond_tolerance) * fill.dp + moved) } else { 0.0 };
    // The contact lists' reach: r_i + r_j + skin, skin in units of r_max (`neighbour_skin`).
    let partners = shell(fill.dp * (1.0 + 0.5 * skin) + moved);
    let exact = !fill.bonded;
    BodySize { kind: fill.kind, particles: n, bonds: 0.5 * n * z, exact, partners }
}

/// Files up to this size are counted row by row; larger ones are estimated.
const COUNT_MAX_BYTES: u64 = 64 << 20;

/// Data rows of a CSV file (non-empty lines not starting with `#`, less the header): counted,
/// or for a large file estimated from the mean length of its first 64 MB of lines.
fn csv_rows(path: &Path) -> Result<(f64, bool), ScenarioError> {
    use std::io::Read;
    let io = |source| ScenarioError::Io { path: path.to_owned(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut head = Vec::with_capacity(len.min(COUNT_MAX_BYTES) as usize);
    file.take(COUNT_MAX_BYTES).read_to_end(&mut head).map_err(io)?;
    let data = |l: &[u8]| {
        let t = l.trim_ascii();
        !t.is_empty() && t[0] != b'#'
    };
    let lines = head.split(|&b| b == b'\n').filter(|l| data(l)).count().saturating_sub(1) as f64;
    if len <= COUNT_MAX_BYTES {
        return Ok((lines, true));
    }
    Ok((lines * len as f64 / head.len().max(1) as f64, false))
}

/// Physical memory plus swap in bytes (Linux `/proc/meminfo`); `None` elsewhere.
pub fn memory_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb = |key: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(key))?;
        line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()
    };
    Some((kb("MemTotal:")? + kb("SwapTotal:").unwrap_or(0)) * 1024)
}

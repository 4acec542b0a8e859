//! `rrpdem generate`: the resolved geometry of a scenario written as CSV files (with a scenario
//! that reads them back), and the report printed about it — counts, coordination, packing, the
//! stability estimate and the memory a run will need (also for `rrpdem run --dry-run`).

use crate::grid::CellGrid;
use crate::model::Particles;
use crate::output::OutputError;
use crate::scenario::{Body, CsvBody, Geometry, Scenario, SizeEstimate};
use crate::stability::{self, StabilityEstimate};
use rayon::prelude::*;
use serde::Serialize;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Header of the particle file: every column the `csv` body reads.
pub const PARTICLES_HEADER: &str = "id,x,y,z,vx,vy,vz,qw,qx,qy,qz,wx,wy,wz,mass,inertia,diameter,fixed";

/// A particle counts as interior when its sphere is at least one particle diameter from the
/// body's surface (so all its lattice neighbours are inside the body). The slack of 1e-9 D_p
/// keeps sites that lie exactly one diameter deep, where round-off decides, out of the count.
pub const INTERIOR_DEPTH: f64 = 1.0 + 1e-9;

/// What `generate` (and `run --dry-run`) prints about a geometry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub name: String,
    pub particles: usize,
    pub bonds: usize,
    /// Bonds per particle: mean `2B/N`, maximum, and how many particles have the maximum.
    pub mean_coordination: f64,
    pub max_coordination: u32,
    pub at_max_coordination: usize,
    /// One entry per `torus_solid` / `block_solid` body.
    pub solids: Vec<SolidReport>,
    pub dt: f64,
    pub stability: StabilityEstimate,
    pub memory: MemoryEstimate,
    /// Why the GPU engine would refuse this model, if it would (MODEL §12–13: `lgvi`, `em`,
    /// `sm`, clumps, mutual gravitation run on the CPU engine only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_only: Option<String>,
}

/// Figures of one lattice-filled body.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SolidReport {
    pub body: usize,
    pub kind: &'static str,
    pub lattice: &'static str,
    pub particles: usize,
    pub particle_diameter: f64,
    /// MODEL §7's estimate of the count (site density × the volume the centres may occupy).
    pub estimate: f64,
    /// Particles whose sphere is at least `D_p` deep (see `INTERIOR_DEPTH`), their mean bond
    /// count, and how many of them have the lattice's full coordination (12 fcc/hcp, 6 sc).
    pub interior: usize,
    pub interior_mean_coordination: f64,
    pub interior_full: usize,
    pub lattice_coordination: u32,
    /// Particle volume / body (tube or box) volume.
    pub packing_fraction: f64,
    pub jitter_rejected: usize,
}

/// Memory a run of the geometry will need, in bytes (see `memory_estimate` for the derivation).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MemoryEstimate {
    /// The `Model` the driver holds during any run (host memory).
    pub model: u64,
    /// The CPU engine's own arrays, including the transient per-particle lists of a neighbour
    /// rebuild.
    pub cpu_engine: u64,
    /// GPU device buffers in f32 and in f64.
    pub gpu_f32: u64,
    pub gpu_f64: u64,
    /// Host memory while the GPU engine is created, beyond the model (freed afterwards).
    pub gpu_upload: u64,
    /// Contact-list partners per particle at t = 0 (within `r_i + r_j + skin`, `Params::skin`
    /// r_max; a sample's mean above 65 536 particles).
    pub contact_partners: f64,
}

/// The report of a geometry.
pub fn report(scenario: &Scenario, geometry: &Geometry) -> Report {
    let p = &geometry.particles;
    let n = p.len();
    let mut coordination = vec![0u32; n];
    for &(i, j) in &geometry.pairs {
        coordination[i as usize] += 1;
        coordination[j as usize] += 1;
    }
    let max_coordination = coordination.par_iter().copied().max().unwrap_or(0);
    let at_max_coordination = coordination.par_iter().filter(|&&c| c == max_coordination).count();
    let solids = geometry
        .bodies
        .iter()
        .enumerate()
        .filter_map(|(b, body)| {
            let s = body.solid.as_ref()?;
            let range = body.range.clone();
            let dp = s.particle_diameter;
            let (interior, interior_bonds, interior_full, volume) = range
                .clone()
                .into_par_iter()
                .map(|i| {
                    let d = 2.0 * p.radius[i];
                    let vol = std::f64::consts::PI / 6.0 * d * d * d;
                    if s.region.depth(s.to_local(p.x[i])) - p.radius[i] >= INTERIOR_DEPTH * dp {
                        let c = coordination[i];
                        (1usize, c as u64, (c == s.lattice.coordination()) as usize, vol)
                    } else {
                        (0, 0, 0, vol)
                    }
                })
                .reduce(|| (0, 0, 0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2, a.3 + b.3));
            Some(SolidReport {
                body: b,
                kind: s.kind,
                lattice: s.lattice.as_str(),
                particles: range.len(),
                particle_diameter: dp,
                estimate: s.estimate,
                interior,
                interior_mean_coordination: if interior > 0 { interior_bonds as f64 / interior as f64 } else { 0.0 },
                interior_full,
                lattice_coordination: s.lattice.coordination(),
                packing_fraction: volume / s.region.volume(),
                jitter_rejected: s.jitter_rejected,
            })
        })
        .collect();
    let x = &p.x;
    // Each bond's rest length: the one it was given (`[i, j, L0]`, in bond order), else its
    // initial distance, as the model takes them (the run's estimate then reads the same).
    let bonds = geometry.pairs.iter().enumerate().map(|(k, &(i, j))| {
        (i, j, geometry.rest_length(k).unwrap_or_else(|| (x[i as usize] - x[j as usize]).length()))
    });
    let stability = stability::estimate_parts(p, &geometry.params, bonds, &geometry.clumps);
    Report {
        name: scenario.name.clone(),
        particles: n,
        bonds: geometry.pairs.len(),
        mean_coordination: if n > 0 { 2.0 * geometry.pairs.len() as f64 / n as f64 } else { 0.0 },
        max_coordination,
        at_max_coordination,
        solids,
        dt: scenario.dt,
        stability,
        memory: memory_estimate_with(
            p,
            &geometry.pairs,
            geometry.params.dissipation,
            geometry.params.walls.len(),
            geometry.params.skin,
            geometry.params.rupture.as_ref().map(|_| geometry.params.weibull()),
        ),
        cpu_only: if scenario.integrator.cpu_only() {
            Some(format!("integrator `{}`", scenario.integrator))
        } else if !geometry.clumps.is_empty() {
            Some("clumps".into())
        } else {
            geometry.params.gravitation.map(|_| "mutual gravitation".into())
        },
    }
}

/// Particles whose contact-list partners are counted for the memory estimate: all of them up
/// to this many, else an evenly spaced sample of this size (the mean is all the estimate needs).
const PARTNER_SAMPLE: usize = 1 << 16;

/// Mean contact-list partners per particle at t = 0: particles closer than `r_i + r_j + skin`
/// (both engines' Verlet lists use the skin `Params::skin` r_max).
fn contact_partners(p: &Particles, skin: f64) -> f64 {
    let n = p.len();
    if n < 2 {
        return 0.0;
    }
    let r_max = p.radius.iter().copied().fold(0.0, f64::max);
    let mut grid = CellGrid::new(n, (2.0 * r_max + skin).max(f64::MIN_POSITIVE));
    // The engines' grid fails on the same positions, so such a run would fail: no partners.
    if grid.build(|i| p.x[i]).is_err() {
        return 0.0;
    }
    let stride = n.div_ceil(PARTNER_SAMPLE);
    let sample: Vec<usize> = (0..n).step_by(stride).collect();
    let total: u64 = sample
        .par_iter()
        .map(|&i| {
            let mut c = 0u64;
            grid.for_each_neighbour(i, |j| {
                let reach = p.radius[i] + p.radius[j] + skin;
                c += ((p.x[i] - p.x[j]).length_squared() < reach * reach) as u64;
            });
            c
        })
        .sum();
    total as f64 / sample.len() as f64
}

/// Bytes a run needs, counted from the engines' data structures.
///
/// - Model (held by the driver during a run): per particle `x, v, Ω` (3 × 24), `q` (32), mass,
///   inertia, radius (3 × 8), fixed (1); per bond `size_of::<Bond>()`.
/// - CPU engine (`src/engine/cpu.rs`, as `CpuEngine::memory` reports it): per particle two
///   `Kinematics` (the state and the rollback copy, 2 × 104), the force/moment accumulator (48),
///   its reference attitude (32: bonds built from the model's starting attitudes keep them per
///   particle), its bond range and the start of its stored bond ends (4 each), mass, inertia
///   and radius (8 each) and fixed (1), where
///   a column whose values are all equal is stored once (nothing per particle); its neighbour list (`src/grid.rs`): cell (12),
///   hash (4), sorted index (4), list offset (4), position at the last rebuild (24),
///   `2^⌈log2 2N⌉ + 1` bucket starts (4 each) and 4 per list entry, and where it leaves bonded
///   pairs out their sorted partners' offsets (4 per particle). Per bond: ends, reference
///   direction and length (40), broken flag and its rollback copy (2); with Weibull rupture
///   also its threshold scale (8, not counted here). When the bond pass runs in parallel (this
///   process's rayon pool has several threads, and there are 2048 bonds or more) it also stores
///   the ends that lie past a range boundary (`src/engine/scatter.rs`; 52 each, a few % of a
///   solid's ends), 8 per particle and 24 per 1024 bonds, allocated only then.
/// - GPU (`src/gpu/state/plan.rs`, `DemState::new`; its host memory while uploading,
///   `gpu_upload`, as commented there), with `rs` the size of a real: per particle
///   twelve vec4 arrays (pos, vel, quat, omega, inertial, force, moment, pot, sorted_pos, x_ref,
///   the reference attitude q_ref and position ref_pos: `48·rs`) and the rollback copies of pos,
///   vel, quat, omega (`16·rs`); fixed, incidence offset, hash, slot, sorted_tmp, nbr_count, list
///   offset, halo offset (4 each), cell and sorted_cell (16 each; in f32 the cell's rollback
///   copy and the reference position's block too), the neighbour lists (4 bytes an entry, at
///   the initial capacity `BatchTotals::initial_nbr_capacity`: 16 less the bonded partners per
///   particle the lists leave out, at least 4), the bucket table and its scan levels; per bond
///   its ends (8), results (12·rs), incidence (8), the sorted bonded partners beside it where
///   the lists leave them out (8) (a generated model's
///   bonds take their reference attitudes, directions and lengths from the particles,
///   `Model::reference_attitudes` and `reference_positions`); the diagnostics partial sums (`NQ·rs`
///   per 64 records of max(N, B), and 16 bytes each in the reduction table). With rupture, per bond 32 bytes in f32 and 48 in f64 more
///   (break records, up to what one binding holds), 2 bits of flags, and 4 or 8 for the
///   Weibull scale (`memory_estimate_with` counts them; this function is for models without).
pub fn memory_estimate(p: &Particles, bond_ends: &[(u32, u32)]) -> MemoryEstimate {
    memory_estimate_with(p, bond_ends, None, 0, crate::grid::SKIN_FACTOR, None)
}

/// `memory_estimate` for a model whose parameters dissipate (MODEL §10, `dissipation`; `walls`
/// its wall count) and whose contact lists have the skin `skin` (`Params::skin`): the CPU
/// engine's loads, velocities and contact history (`DissState`), the GPU's loads and their
/// backup, the bonds' other ends beside the incidence with binder damping (`inc_peer`) and the
/// friction's contact history and its backup (`gpu::batch::history_sizes`).
pub fn memory_estimate_with(
    p: &Particles,
    bond_ends: &[(u32, u32)],
    dissipation: Option<crate::interactions::Dissipation>,
    walls: usize,
    skin: f64,
    rupture: Option<bool>,
) -> MemoryEstimate {
    use glam::DQuat;
    use std::mem::size_of;
    let n = p.len() as u64;
    let f = size_of::<f64>() as u64;
    let r_max = p.radius.iter().copied().fold(0.0, f64::max);
    // A column stored once, inline, when every particle has the same value.
    let constant = |v: &[f64]| if v.windows(2).all(|w| w[0] == w[1]) { 0 } else { n * f };
    // The engine's `1/m`, `1/J` columns (0 for a fixed particle).
    let inverse = |v: &[f64]| {
        let inv: Vec<f64> = v.iter().zip(&p.fixed).map(|(&m, &fixed)| if fixed { 0.0 } else { 1.0 / m }).collect();
        constant(&inv)
    };
    let flags = if p.fixed.windows(2).all(|w| w[0] == w[1]) { 0 } else { n };
    let attitudes = if p.q.windows(2).all(|w| w[0] == w[1]) { 0 } else { n * size_of::<DQuat>() as u64 };
    // The parallel bond pass's ranges (`src/engine/scatter.rs`), on this process's pool.
    let parallel = crate::engine::cpu::parallel_bonds(bond_ends.len());
    memory_of(&Layout {
        n,
        b: bond_ends.len() as u64,
        cpu_partners: contact_partners(p, skin * r_max),
        gpu_partners: contact_partners(p, skin * r_max),
        varying: attitudes
            + constant(&p.mass)
            + constant(&p.inertia)
            + inverse(&p.mass)
            + inverse(&p.inertia)
            + constant(&p.radius)
            + flags,
        stored_ends: if parallel { crate::engine::stored_ends(n as usize, bond_ends) as u64 } else { 0 },
        parallel,
        dissipation,
        walls: walls as u64,
        skin,
        rupture,
    })
}

/// What the memory figures depend on beyond the counts.
struct Layout {
    n: u64,
    b: u64,
    /// Contact-list partners per particle of the CPU engine and of the GPU engine.
    cpu_partners: f64,
    gpu_partners: f64,
    /// Bytes of the per-particle columns that are not constant (attitudes, masses, inertias,
    /// their inverses, radii, fixed flags), in all.
    varying: u64,
    /// Whether the CPU bond pass runs in parallel, and the bond ends it then stores.
    parallel: bool,
    stored_ends: u64,
    /// MODEL §10's coefficients where the model dissipates, and its walls.
    dissipation: Option<crate::interactions::Dissipation>,
    walls: u64,
    /// The contact lists' skin (`Params::skin`).
    skin: f64,
    /// Whether bonds break (MODEL §6), and then whether their thresholds scatter (Weibull).
    rupture: Option<bool>,
}

/// The precision whose reals are `rs` bytes.
fn precision_of(rs: u64) -> crate::engine::Precision {
    if rs == 4 { crate::engine::Precision::F32 } else { crate::engine::Precision::F64 }
}

/// The figures of `memory_estimate` from the counts (see there for each term).
fn memory_of(l: &Layout) -> MemoryEstimate {
    use crate::gpu::shader::{NQ, NW, SCAN_WG, WG};
    use crate::integrator::Kinematics;
    use crate::model::Bond;
    use glam::{DQuat, DVec3};
    use std::mem::size_of;
    let (n, b) = (l.n, l.b);
    let partners = (l.cpu_partners * n as f64).round() as u64;
    // Both engines' lists leave bonded pairs out (`grid::BondedPartners`); the GPU's lists then
    // start shorter.
    let unlisted = b > 0;
    let gpu_lists = crate::gpu::batch::BatchTotals {
        n,
        unlisted_bonds: if unlisted { b } else { 0 },
        max_skin: l.skin,
        ..Default::default()
    };
    let list_capacity = gpu_lists.initial_nbr_capacity() as u64;
    let (v3, q4, f) = (size_of::<DVec3>() as u64, size_of::<DQuat>() as u64, size_of::<f64>() as u64);
    let model = n * (3 * v3 + q4 + 3 * f + 1) + b * size_of::<Bond>() as u64;
    let buckets = crate::grid::bucket_count(n as usize) as u64;
    let cpu_engine = n * (2 * size_of::<Kinematics>() as u64 + 2 * v3 + 8 * l.parallel as u64)
        + l.varying
        + n * (12 + 4 + 4 + 4 + v3)
        + 4 * (buckets + 1)
        + 4 * partners
        // The bonded partners the list leaves out (`grid::BondedPartners`): their entries move
        // from the list (counted in `partners`, all within reach at rest) to it, with offsets.
        + if unlisted { 4 * (n + 1) } else { 0 }
        + b * (40 + 2)
        + if l.parallel { 52 * l.stored_ends + 32 * b.div_ceil(1024) } else { 0 };
    // MODEL §10 (`DissState::bytes`): loads and the velocities they were formed from (48 B
    // each per particle), the history's offsets (always made), and with friction 4 + 2·24 B
    // per listed contact partner, 2·24 B per bond (its pair's, kept with the bond where the
    // lists leave bonded pairs out: `CpuEngine::bond_contacts`) and 2·24 B per particle and
    // wall; the parallel bond pass stores a deferred end's two loads (48 B more) where it gives
    // dissipative loads (binder damping, or the bonded pairs' dashpots and sliders).
    let (diss_cpu, diss_gpu) = match l.dissipation {
        None => (0, Box::new(|_: u64| 0u64) as Box<dyn Fn(u64) -> u64>),
        Some(d) => {
            let wall_pairs = if d.mu_wall > 0.0 { 48 * n * l.walls } else { 0 };
            let listed = if unlisted { partners.saturating_sub(2 * b) } else { partners };
            let cpu = 96 * n
                + 4 * (n + 1)
                + if d.mu > 0.0 { 52 * listed + 48 * b } else { 0 }
                + wall_pairs
                + if (d.binder() || d.pairs()) && l.parallel { 48 * l.stored_ends } else { 0 };
            let totals = crate::gpu::batch::BatchTotals {
                n,
                pair_friction: d.mu > 0.0,
                wall_friction: d.mu_wall > 0.0,
                max_walls: l.walls,
                ..Default::default()
            };
            // The bonds' other ends beside the incidence (`inc_peer`: binder damping, or the
            // bonded pairs' dashpots and sliders).
            let peers = crate::gpu::batch::reads_bond_peers(&d);
            // The bonded pairs' history beside the incidence (`inc_xi`) and its backup.
            let bond_totals = crate::gpu::batch::BatchTotals {
                nb: b,
                pair_friction: d.mu > 0.0,
                unlisted_bonds: if unlisted { b } else { 0 },
                ..Default::default()
            };
            let gpu = move |rs: u64| {
                let history: u64 = crate::gpu::batch::history_sizes(&totals, precision_of(rs)).iter().sum();
                let bond_history = crate::gpu::batch::bond_history_bytes(&bond_totals, precision_of(rs));
                // The history and its backup.
                24 * rs * n + if peers { 8 * b } else { 0 } + 2 * history + 2 * bond_history
            };
            (cpu, Box::new(gpu) as Box<dyn Fn(u64) -> u64>)
        }
    };
    let cpu_engine = cpu_engine + diss_cpu;
    // With rupture (`DemState::new`): a break record per bond (`4·rs` + 16 B, `break_at` and
    // `break_id`; at most `MAX_BREAK_RECORDS`, or what one binding holds), the broken flags and
    // their backup (a bit each per bond, in u32 words), and with Weibull the thresholds' scales.
    let rupture_gpu = |rs: u64| match l.rupture {
        None => 0,
        Some(weibull) => {
            (4 * rs + 16) * b.min(crate::gpu::sizes::MAX_BREAK_RECORDS)
                + 2 * 4 * b.div_ceil(32)
                + if weibull { rs * b } else { 0 }
        }
    };
    let gpu = |rs: u64| {
        let records = n.max(b).max(1).div_ceil(WG as u64);
        let watch = n.max(1).div_ceil((WG * crate::gpu::shader::WATCH_PER_LANE) as u64);
        let mut scan = 0;
        let mut len = buckets;
        while len > 2 * SCAN_WG as u64 {
            len = len.div_ceil(2 * SCAN_WG as u64);
            scan += 4 * len;
        }
        // In f32 the position blocks' rollback copy and the reference positions' blocks.
        let blocks = if rs == 4 { 2 * 16 } else { 0 };
        n * (64 * rs + 8 * 4 + 2 * 16 + blocks + 4 * list_capacity)
            + 4 * (buckets + 1)
            + scan
            + (NQ as u64 * rs + 16) * (records + records.div_ceil(WG as u64))
            // The energy watch's partial sums and chunk table, over the particles only.
            + (NW as u64 * rs + 16) * (watch + watch.div_ceil(WG as u64))
            + b * (8 + 12 * rs + 8)
            + if unlisted { 8 * b } else { 0 }
            + diss_gpu(rs)
            + rupture_gpu(rs)
    };
    // DemState::new keeps the incidence (4 B per particle, 8 per bond) and the bonds' ends
    // (8 per bond, for break events) and makes one array at a time, in the device's
    // precision, written in slices of 64 MiB (wgpu's staging copies): the largest array is a
    // per-particle vec4 in f64 (32 B per particle) or the bond ends.
    // With the bonded pairs out of the lists, the sorted bonded partners (8 per bond) and the
    // incidence they are sorted from (4 per particle, 8 per bond) beside it.
    let gpu_upload = 4 * n + 16 * b + (32 * n).max(8 * b) + if unlisted { 4 * n + 16 * b } else { 0 } + (64 << 20);
    MemoryEstimate { model, cpu_engine, gpu_f32: gpu(4), gpu_f64: gpu(8), gpu_upload, contact_partners: l.gpu_partners }
}

/// Models whose size estimate is at most this many particles are built for the report (exact
/// figures, a few seconds and about 1 GB at 10⁶); larger ones get the analytic `Estimate`.
pub const EXACT_MAX_PARTICLES: f64 = 1e6;

/// What `run --dry-run` reports on a model too large to build just to be measured: its size
/// from the bodies' closed forms (`Scenario::size_estimate`) and the memory a run would need
/// from the engines' per-particle and per-bond figures, with every column counted as varying
/// (an upper bound for uniform bodies) and the parallel bond pass storing a tenth of the ends.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    pub name: String,
    pub size: SizeEstimate,
    pub memory: MemoryEstimate,
}

/// The analytic estimate of a scenario's model (builds nothing).
pub fn estimate(scenario: &Scenario, size: &SizeEstimate) -> Estimate {
    let (n, b) = (size.particles.round() as u64, size.bonds.round() as u64);
    let parallel = crate::engine::cpu::parallel_bonds(b as usize);
    let per_particle = 5 * 8 + 1 + 32;
    let memory = memory_of(&Layout {
        n,
        b,
        cpu_partners: size.partners(),
        gpu_partners: size.partners(),
        varying: n * per_particle,
        parallel,
        stored_ends: b / 5,
        dissipation: scenario.params().dissipation,
        walls: scenario.walls.len() as u64,
        skin: scenario.params().skin,
        rupture: scenario.params().rupture.as_ref().map(|_| scenario.params().weibull()),
    });
    Estimate { name: scenario.name.clone(), size: size.clone(), memory }
}

impl fmt::Display for Estimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.size;
        let bound = if s.exact { "" } else { "at most " };
        writeln!(f, "scenario        {}", self.name)?;
        writeln!(
            f,
            "estimate        the model was not built (more than {EXACT_MAX_PARTICLES:.0e} particles): figures below are estimates from the bodies' closed forms"
        )?;
        writeln!(f, "particles       {:.4e}", s.particles)?;
        writeln!(f, "bonds           {bound}{:.4e}", s.bonds)?;
        for (k, b) in s.bodies.iter().enumerate() {
            writeln!(
                f,
                "body {k:<10} {}: {:.4e} particles, {}{:.4e} bonds{}, {:.0} contact partners each",
                b.kind,
                b.particles,
                if b.exact { "" } else { "at most " },
                b.bonds,
                if b.exact { "" } else { " (the lattice's interior coordination for every particle)" },
                b.partners
            )?;
        }
        let m = &self.memory;
        writeln!(
            f,
            "memory          CPU run ≈ {} (model {} + engine {})",
            human(m.model + m.cpu_engine),
            human(m.model),
            human(m.cpu_engine)
        )?;
        writeln!(
            f,
            "                GPU run: device ≈ {} in f32, {} in f64; host ≈ {} (model) + {} while uploading",
            human(m.gpu_f32),
            human(m.gpu_f64),
            human(m.model),
            human(m.gpu_upload)
        )?;
        write!(f, "stability       not estimated without the model: a run checks dt against it once built")
    }
}

/// Bytes in a human unit.
fn human(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        0..1_000_000 => format!("{:.1} kB", b / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", b / 1e6),
        _ => format!("{:.2} GB", b / 1e9),
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "scenario        {}", self.name)?;
        writeln!(f, "particles       {}", self.particles)?;
        writeln!(f, "bonds           {}", self.bonds)?;
        writeln!(
            f,
            "coordination    mean {:.3}  max {} ({} particles, {:.1} %)",
            self.mean_coordination,
            self.max_coordination,
            self.at_max_coordination,
            100.0 * self.at_max_coordination as f64 / self.particles.max(1) as f64
        )?;
        for s in &self.solids {
            writeln!(
                f,
                "body {:<10} {} {}: {} particles, D_p = {:.6e}, MODEL §7 estimate {:.0} ({:+.2} %)",
                s.body,
                s.kind,
                s.lattice,
                s.particles,
                s.particle_diameter,
                s.estimate,
                100.0 * (s.particles as f64 / s.estimate - 1.0)
            )?;
            writeln!(
                f,
                "  interior      {} particles ≥ D_p deep: mean coordination {:.3}, {} with all {} bonds",
                s.interior, s.interior_mean_coordination, s.interior_full, s.lattice_coordination
            )?;
            writeln!(f, "  packing       {:.4} (particle volume / body volume)", s.packing_fraction)?;
            if s.jitter_rejected > 0 {
                writeln!(f, "  jitter        {} proposals rejected (overlap or outside)", s.jitter_rejected)?;
            }
        }
        writeln!(
            f,
            "stability       h_max ≈ {:.3e} ({}); dt = {} is {} % of it",
            self.stability.h_max,
            self.stability.limiting,
            self.dt,
            crate::stability::percent_of(self.dt, self.stability.h_max)
        )?;
        let m = &self.memory;
        writeln!(
            f,
            "memory          CPU run ≈ {} (model {} + engine {}; {:.1} contact partners per particle)",
            human(m.model + m.cpu_engine),
            human(m.model),
            human(m.cpu_engine),
            m.contact_partners
        )?;
        if let Some(why) = &self.cpu_only {
            return write!(f, "                GPU run: none ({why} runs on the CPU engine only)");
        }
        write!(
            f,
            "                GPU run: device ≈ {} in f32, {} in f64; host ≈ {} (model) + {} while uploading",
            human(m.gpu_f32),
            human(m.gpu_f64),
            human(m.model),
            human(m.gpu_upload)
        )
    }
}

/// The files `write` makes in `dir`, after checking that it can: `dir` is a folder (or does not
/// exist yet), and none of the files exists unless `overwrite` (a second `generate` into the
/// same folder must not silently replace a geometry). Call it before building a large model.
pub fn check_targets(dir: &Path, overwrite: bool) -> Result<Written, OutputError> {
    let refuse = |path: &Path, message: String| OutputError {
        path: path.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, message),
    };
    if let Some(file) = crate::output::file_in_the_way(dir) {
        return Err(refuse(dir, format!("{} is a file, not a folder (--out names a folder)", file.display())));
    }
    let files = Written {
        particles: dir.join("particles.csv"),
        bonds: dir.join("bonds.csv"),
        scenario: dir.join("scenario.json"),
    };
    if !overwrite {
        for f in [&files.particles, &files.bonds, &files.scenario] {
            if f.exists() {
                return Err(refuse(
                    f,
                    "exists already; pass --overwrite to replace it, or choose another --out".into(),
                ));
            }
        }
    }
    Ok(files)
}

/// The files `write` made.
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    pub particles: PathBuf,
    pub bonds: PathBuf,
    pub scenario: PathBuf,
}

/// Rows formatted per parallel task, and tasks per write (bounds the text held in memory to
/// about 16 × 16384 rows × 350 bytes ≈ 90 MB).
const ROWS_PER_TASK: usize = 16384;
const TASKS_PER_WRITE: usize = 16;

/// Writes `particles.csv`, `bonds.csv` and `scenario.json` (the scenario with one `csv` body
/// reading them, everything else copied) into `dir`. Numbers have 17 significant digits (as
/// `diagnostics::fmt17`), so
/// reading them back gives the same f64 values: the same model, bit for bit.
/// Files already there are refused (`write_files` with `overwrite` replaces them).
pub fn write(scenario: &Scenario, geometry: &Geometry, dir: &Path) -> Result<Written, OutputError> {
    write_files(scenario, geometry, dir, false)
}

/// `write`, replacing files already there when `overwrite`.
pub fn write_files(
    scenario: &Scenario,
    geometry: &Geometry,
    dir: &Path,
    overwrite: bool,
) -> Result<Written, OutputError> {
    let err = |path: &Path| {
        let path = path.to_owned();
        move |source| OutputError { path: path.clone(), source }
    };
    if !geometry.clumps.is_empty() {
        // A CSV row is a free sphere: the clumps would come back as loose spheres.
        let n = geometry.clumps.len();
        return Err(err(dir)(std::io::Error::other(format!(
            "{} has {n} rigid {} (MODEL §12: `clump` bodies, or a `pendulum` with an inertia tensor), which \
             particles.csv cannot hold (its rows are free spheres): the scenario itself is the geometry; nothing was \
             written",
            scenario.source.display(),
            if n == 1 { "body" } else { "bodies" },
        ))));
    }
    let files = check_targets(dir, overwrite)?;
    std::fs::create_dir_all(dir).map_err(err(dir))?;
    let p = &geometry.particles;
    write_rows(&files.particles, PARTICLES_HEADER, p.len(), |i, out, cache| particle_row(p, i, out, cache))?;
    let pairs = &geometry.pairs;
    // Bonds given a rest length keep it (the others rest at their initial distance: an empty
    // cell), so that the file builds the same model.
    let rest = &geometry.rest_lengths;
    let header = if rest.is_empty() { "i,j" } else { "i,j,rest_length" };
    write_rows(&files.bonds, header, pairs.len(), |k, out, _| {
        let mut b = itoa::Buffer::new();
        out.extend_from_slice(b.format(pairs[k].0).as_bytes());
        out.push(b',');
        out.extend_from_slice(b.format(pairs[k].1).as_bytes());
        if !rest.is_empty() {
            out.push(b',');
            if let Some(l0) = geometry.rest_length(k) {
                // 17 significant digits, as the particles' columns: the same f64 read back.
                let _ = write!(out, "{l0:.16e}");
            }
        }
        out.push(b'\n');
    })?;
    let mut s = scenario.clone();
    s.bodies = vec![Body::Csv(CsvBody { particles: "particles.csv".into(), bonds: Some("bonds.csv".into()) })];
    let from = scenario.source.display();
    s.description = Some(match &scenario.description {
        Some(d) => format!("{d} (geometry generated from {from})"),
        None => format!("geometry generated from {from}"),
    });
    crate::output::write_json(&files.scenario, &s)?;
    Ok(files)
}

/// The last value formatted per column: lattice bodies repeat most columns (attitude, mass,
/// diameter, often velocity), and copying text is much cheaper than formatting a float.
type ColumnCache = [(u64, Vec<u8>); 17];

fn particle_row(p: &Particles, i: usize, out: &mut Vec<u8>, cache: &mut ColumnCache) {
    let (x, v, q, w) = (p.x[i], p.v[i], p.q[i], p.w[i]);
    let values =
        [x.x, x.y, x.z, v.x, v.y, v.z, q.w, q.x, q.y, q.z, w.x, w.y, w.z, p.mass[i], p.inertia[i], 2.0 * p.radius[i]];
    out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
    for (c, value) in values.into_iter().enumerate() {
        out.push(b',');
        let (bits, text) = &mut cache[c];
        if *bits != value.to_bits() || text.is_empty() {
            *bits = value.to_bits();
            text.clear();
            // fmt17's format (17 significant digits), written without an intermediate String.
            let _ = write!(text, "{value:.16e}");
        }
        out.extend_from_slice(text);
    }
    out.extend_from_slice(if p.fixed[i] { b",1\n" } else { b",0\n" });
}

/// Writes `n` rows formatted by `row` after a header: rows are formatted in parallel in blocks
/// and written in order, into `<name>.partial` beside `path`, renamed to `path` once complete
/// (a run killed while writing leaves no truncated file under the name a scenario reads).
fn write_rows(
    path: &Path,
    header: &str,
    n: usize,
    row: impl Fn(usize, &mut Vec<u8>, &mut ColumnCache) + Sync,
) -> Result<(), OutputError> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    let partial = path.with_file_name(name);
    write_rows_to(&partial, header, n, row)?;
    std::fs::rename(&partial, path).map_err(|source| OutputError { path: path.to_owned(), source })
}

fn write_rows_to(
    path: &Path,
    header: &str,
    n: usize,
    row: impl Fn(usize, &mut Vec<u8>, &mut ColumnCache) + Sync,
) -> Result<(), OutputError> {
    let io = |source| OutputError { path: path.to_owned(), source };
    let mut file = std::fs::File::create(path).map_err(io)?;
    writeln!(file, "{header}").map_err(io)?;
    let per_write = ROWS_PER_TASK * TASKS_PER_WRITE;
    for start in (0..n).step_by(per_write) {
        let end = (start + per_write).min(n);
        let blocks: Vec<Vec<u8>> = (start..end)
            .step_by(ROWS_PER_TASK)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|s| {
                let mut out = Vec::with_capacity(ROWS_PER_TASK * 64);
                let mut cache: ColumnCache = Default::default();
                for i in s..(s + ROWS_PER_TASK).min(end) {
                    row(i, &mut out, &mut cache);
                }
                out
            })
            .collect();
        for b in blocks {
            file.write_all(&b).map_err(io)?;
        }
    }
    file.flush().map_err(io)
}

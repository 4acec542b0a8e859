//! Spatial particle order: an engine runs the model with its particles sorted along a Morton
//! curve when the user's numbering scatters neighbours through memory, and `Reordered` maps
//! everything the run driver reads back to the user's numbering.
//!
//! Why: every force is a gather of the two ends' states. When spatial neighbours lie far apart
//! in index order (particles read from a CSV file in arbitrary order, bodies listed in an order
//! that interleaves them), each gather misses the caches (CPU) or reads a separate memory
//! segment per thread (GPU). Measured on the CPU engine, one thread, an FCC block of 97 556
//! spheres (565 326 bonds), particle-steps/s: 2.1–2.2·10⁶ in the generator's order; shuffled,
//! 6.7–7.8·10⁵ (bonds listed by the shuffled numbering) or 1.1–1.3·10⁶ (bonds left in spatial
//! order); the shuffled block in the order `auto` gives it, 1.8–1.9·10⁶ (docs/BENCHMARKS.md).
//!
//! What: the order is a pure function of the particles' reference positions (where the bonds
//! were made: `Model::reference_x`, else `particles.x`), so it is the same for a run and for its
//! resumed continuation; checkpoints also store it (`Checkpoint::order`). Particles are sorted
//! by the Morton code of their position quantised to 2²¹ steps per axis over the bounding box,
//! ties by position and then index; bonds by their ends' new indices (lower end first), each
//! keeping its orientation (i stays i). The Weibull scale of a bond keeps being drawn from the
//! user's indices (`Model::user_ids`), so a reordered run breaks the bonds an unordered one
//! breaks. Results in the engine's order differ from the user order's in the last bits (sums
//! run in another order); the same model gives the same bits in whatever order it is read,
//! because the engine's order does not depend on it (tested).
//!
//! When: `particle_order` in the scenario: `input` keeps the user's order, `spatial` always
//! sorts, `auto` (the default) sorts when it pays: a model of at least `AUTO_MIN_PARTICLES`
//! whose Morton-consecutive particles are more than `LOCAL_WINDOW` indices apart nearly as often as a
//! random order's share (`scatter`, compared with `AUTO_THRESHOLD`). The generators' orders
//! (rings in sequence, lattices along their own Morton curve) score at most one half, so generated
//! models run in their own order and their results do not change.
//!
//! During a run: bonded bodies keep their neighbours, but a granular flow mixes its particles
//! until any order is a random one (measured: `scatter` 0.13 after 1000 steps of a gas, 0.42
//! after 11 000; docs/BENCHMARKS.md). So every `Engine::order_check_interval` steps (a step
//! count, decided at the run's start and kept in its checkpoints, so that a resumed run checks
//! where the uninterrupted one did; also at the last step, for runs extended from there; not
//! in GPU studies, whose replicas share one state) the run driver measures
//! the engine order's `scatter` at the current positions (`Order::resort`), and where it exceeds
//! `AUTO_THRESHOLD` (`auto` and `spatial`; `auto` only from `AUTO_MIN_PARTICLES`) the engine is
//! renumbered along the Morton curve of the current positions (`Engine::renumber`). The new
//! order is again a pure function of the state (positions, ties by user index); checkpoints
//! store it, so a resumed run continues in it bit for bit. `summary.json` lists the re-sorts.

use crate::error::EngineError;
use crate::grid::morton3;
use crate::interactions::BreakEvent;
use crate::model::{Bond, Model, Particles};
use glam::DVec3;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Index distance within which two particles count as near in memory: 1024 particles are about
/// 100 kB of engine state, well inside a CPU's L2 cache and a GPU's L1.
pub const LOCAL_WINDOW: u32 = 1024;
/// `auto` sorts when `scatter` exceeds this: the user's order is then nearly as scattered as a
/// random one. Measured: rings of 100 spheres (`bench` rings-1e5, rings-1e6) 0.005 / 0.06,
/// Morton-ordered lattices under another quantisation (fcc-1e5, fcc-1e6, solid-torus-1e5,
/// solid-torus-1e6) 0.50 / 0.42 / 0.12 / 0.18, the same models shuffled 1.00; a row-major block
/// stays below one half (its steps along the slowest axis are the far ones).
pub const AUTO_THRESHOLD: f64 = 0.75;
/// `auto` leaves models smaller than this in their order: their state fits the caches anyway.
pub const AUTO_MIN_PARTICLES: usize = 4096;

/// The `particle_order` field of a scenario.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OrderChoice {
    /// Sort along a Morton curve when the user's order lacks locality (see the module doc).
    #[default]
    Auto,
    /// Keep the user's order.
    Input,
    /// Always sort along a Morton curve.
    Spatial,
}

impl OrderChoice {
    pub fn is_auto(&self) -> bool {
        *self == OrderChoice::Auto
    }

    /// Whether a run of `n` particles checks its order during the run (`Order::resort`).
    pub fn checks_during_run(&self, n: usize) -> bool {
        match self {
            OrderChoice::Input => false,
            OrderChoice::Auto => n >= AUTO_MIN_PARTICLES,
            OrderChoice::Spatial => true,
        }
    }
}

/// A re-sort during a run (`Reordered::resort`), as `summary.json` lists it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resort {
    /// The step and time at which the engine was renumbered.
    pub step: u64,
    pub t: f64,
    /// The `scatter` of the order it left (0 along a Morton curve, about 1 random).
    pub scatter: f64,
}

/// A permutation of a model's particles and bonds: engine index → user index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// `particles[k]`: the user index of the engine's particle k.
    pub particles: Vec<u32>,
    /// `bonds[k]`: the user index of the engine's bond k.
    pub bonds: Vec<u32>,
    /// `inverse[u]`: the engine index of the user's particle u.
    inverse: Vec<u32>,
}

/// The particles' Morton order: user indices in the order of their quantised positions.
fn morton_sequence(x: &[DVec3]) -> Vec<u32> {
    let n = x.len();
    assert!(n <= u32::MAX as usize, "particle indices are u32");
    let (lo, hi) = x
        .iter()
        .fold((DVec3::splat(f64::INFINITY), DVec3::splat(f64::NEG_INFINITY)), |(lo, hi), &p| (lo.min(p), hi.max(p)));
    let extent = (hi - lo).max_element();
    // One scale for all axes, so the curve's cells are cubes; 2²¹ − 1 steps over the longest edge.
    let scale = if extent > 0.0 { ((1u64 << 21) - 1) as f64 / extent } else { 0.0 };
    let quantise = |v: f64| (v * scale).clamp(0.0, ((1u64 << 21) - 1) as f64) as u64;
    let keys: Vec<u64> = x
        .par_iter()
        .map(|&p| {
            let d = p - lo;
            morton3(quantise(d.x), quantise(d.y), quantise(d.z))
        })
        .collect();
    let mut seq: Vec<u32> = (0..n as u32).collect();
    // A total order that does not depend on the input's numbering (but for particles at one
    // position), so the same model read in any order gets the same engine order.
    seq.par_sort_unstable_by(|&a, &b| {
        let (pa, pb) = (x[a as usize], x[b as usize]);
        keys[a as usize]
            .cmp(&keys[b as usize])
            .then(pa.x.total_cmp(&pb.x))
            .then(pa.y.total_cmp(&pb.y))
            .then(pa.z.total_cmp(&pb.z))
            .then(a.cmp(&b))
    });
    seq
}

/// How scattered the order of `seq` (user indices along a Morton curve) is: the fraction of
/// consecutive entries more than `LOCAL_WINDOW` apart, over what a random order gives,
/// (1 − W/n)². About 0 for a model in this Morton order, about 1 for a shuffled one; another
/// space-filling curve scores up to one half, because neighbours across its coarse cells'
/// faces are far apart in index whatever the curve.
fn scatter_of(seq: &[u32]) -> f64 {
    let n = seq.len();
    let random = (1.0 - f64::from(LOCAL_WINDOW) / n as f64).powi(2);
    if n < 2 || random <= 0.0 {
        return 0.0;
    }
    let far = seq.par_windows(2).filter(|w| w[0].abs_diff(w[1]) > LOCAL_WINDOW).count();
    far as f64 / (n - 1) as f64 / random
}

/// How scattered through memory the particles at `x` are in their index order (`scatter_of`):
/// 0 for an order along a Morton curve, about 1 for a random one.
pub fn scatter(x: &[DVec3]) -> f64 {
    scatter_of(&morton_sequence(x))
}

/// Reference positions of a model (where its bonds were made), from which its order is taken.
fn reference(model: &Model) -> &[DVec3] {
    model.reference_x.as_deref().unwrap_or(&model.particles.x)
}

impl Order {
    /// The order `choice` asks for, or `None` for the user's own (`input`, or `auto` when that
    /// is local enough); with `auto`, also the `scatter` of the user's order that decided it.
    pub fn choose(model: &Model, choice: OrderChoice) -> (Option<Order>, Option<f64>) {
        let n = model.particles.len();
        let seq = match choice {
            // A clump's spheres are a range of the particles, and `lgvi`'s engine keeps its order.
            _ if !model.clumps.is_empty() => return (None, None),
            OrderChoice::Input => return (None, None),
            OrderChoice::Auto if n < AUTO_MIN_PARTICLES => return (None, None),
            _ => morton_sequence(reference(model)),
        };
        let scatter = (choice == OrderChoice::Auto).then(|| scatter_of(&seq));
        if scatter.is_some_and(|s| s <= AUTO_THRESHOLD) {
            return (None, scatter);
        }
        (Some(Order::from_sequence(model, seq)), scatter)
    }

    /// The check during a run whose engine runs in `current` (`None`: the user's order), its
    /// particles now at `x` (user numbering): the spatial order of `x` when the current order
    /// has become nearly as scattered as a random one (`scatter` above `AUTO_THRESHOLD`, the
    /// test the start applies), else `None`; and that scatter.
    pub fn resort(model: &Model, x: &[DVec3], current: Option<&Order>) -> (Option<Order>, f64) {
        assert_eq!(x.len(), model.particles.len(), "positions of the model's particles");
        let seq = morton_sequence(x);
        let scatter = match current {
            // The engine indices along the curve: what the engine's gathers see.
            Some(o) => scatter_of(&seq.par_iter().map(|&u| o.inverse[u as usize]).collect::<Vec<_>>()),
            None => scatter_of(&seq),
        };
        if scatter <= AUTO_THRESHOLD {
            return (None, scatter);
        }
        (Some(Order::from_sequence(model, seq)), scatter)
    }

    /// The renumbering that takes an engine running in `old` (`None`: the user's order) to
    /// `new`: the engine's new particle k is its old particle `particles[k]`, its new bond k its
    /// old bond `bonds[k]` (what `Engine::renumber` is given).
    pub fn relative(old: Option<&Order>, new: &Order) -> Order {
        let Some(old) = old else { return new.clone() };
        assert_eq!(old.particles.len(), new.particles.len(), "orders of one model");
        assert_eq!(old.bonds.len(), new.bonds.len(), "orders of one model");
        let particles: Vec<u32> = new.particles.par_iter().map(|&u| old.inverse[u as usize]).collect();
        let mut old_bond = vec![0u32; old.bonds.len()];
        for (k, &u) in old.bonds.iter().enumerate() {
            old_bond[u as usize] = k as u32;
        }
        let bonds = new.bonds.par_iter().map(|&u| old_bond[u as usize]).collect();
        let mut inverse = vec![0u32; particles.len()];
        for (k, &p) in particles.iter().enumerate() {
            inverse[p as usize] = k as u32;
        }
        Order { particles, bonds, inverse }
    }

    /// Checks that this renumbering and its renumbered `model` fit an engine of `n` particles
    /// and `nb` bonds (what `Engine::renumber` is given), else says what does not.
    pub fn check_renumbering(&self, model: &Model, n: usize, nb: usize) -> Result<(), EngineError> {
        let (pn, pb, mn, mb) = (self.particles.len(), self.bonds.len(), model.particles.len(), model.bonds.len());
        if (pn, pb, mn, mb) == (n, nb, n, nb) {
            return Ok(());
        }
        Err(EngineError::Unsupported(format!(
            "a renumbering of {pn} particles and {pb} bonds (model: {mn}, {mb}) for an engine of {n} and {nb}"
        )))
    }

    /// The spatial order of `model` (what `spatial` runs).
    pub fn spatial(model: &Model) -> Order {
        Order::from_sequence(model, morton_sequence(reference(model)))
    }

    fn from_sequence(model: &Model, particles: Vec<u32>) -> Order {
        let mut inverse = vec![0u32; particles.len()];
        for (k, &u) in particles.iter().enumerate() {
            inverse[u as usize] = k as u32;
        }
        let ends = |b: &Bond| {
            let (i, j) = (inverse[b.i as usize], inverse[b.j as usize]);
            (i.min(j), i.max(j))
        };
        let mut bonds: Vec<u32> = (0..model.bonds.len() as u32).collect();
        bonds.par_sort_unstable_by_key(|&b| (ends(&model.bonds[b as usize]), b));
        Order { particles, bonds, inverse }
    }

    /// An order read back from a checkpoint, checked to be permutations of `n` particles and
    /// `nb` bonds (the message says what is wrong).
    pub fn from_parts(particles: Vec<u32>, bonds: Vec<u32>, n: usize, nb: usize) -> Result<Order, String> {
        fn inverse_of(p: &[u32], n: usize, what: &str) -> Result<Vec<u32>, String> {
            if p.len() != n {
                return Err(format!("the {what} order has {} entries for {n} {what}s", p.len()));
            }
            let mut inv = vec![u32::MAX; n];
            for (k, &u) in p.iter().enumerate() {
                match inv.get_mut(u as usize) {
                    Some(slot) if *slot == u32::MAX => *slot = k as u32,
                    _ => return Err(format!("the {what} order is not a permutation (entry {k} is {u})")),
                }
            }
            Ok(inv)
        }
        let inverse = inverse_of(&particles, n, "particle")?;
        inverse_of(&bonds, nb, "bond")?;
        Ok(Order { particles, bonds, inverse })
    }

    /// The engine index of the user's particle `u`.
    pub fn engine_particle(&self, u: usize) -> usize {
        self.inverse[u] as usize
    }

    /// The user index of the engine's particle `k`.
    pub fn user_particle(&self, k: usize) -> usize {
        self.particles[k] as usize
    }

    /// `model` in this order: particles, reference positions and bonds permuted (bonds keep
    /// their orientation and reference data), and `user_ids` set for the Weibull scales.
    pub fn apply(&self, model: &Model) -> Model {
        let p = &model.particles;
        assert_eq!(self.particles.len(), p.len(), "an order for this model's particles");
        assert_eq!(self.bonds.len(), model.bonds.len(), "an order for this model's bonds");
        let take = |k: usize| self.particles[k] as usize;
        let gather = |v: &Vec<DVec3>| -> Vec<DVec3> { (0..p.len()).into_par_iter().map(|k| v[take(k)]).collect() };
        let particles = Particles {
            x: gather(&p.x),
            v: gather(&p.v),
            q: (0..p.len()).into_par_iter().map(|k| p.q[take(k)]).collect(),
            w: gather(&p.w),
            mass: (0..p.len()).map(|k| p.mass[take(k)]).collect(),
            inertia: (0..p.len()).map(|k| p.inertia[take(k)]).collect(),
            radius: (0..p.len()).map(|k| p.radius[take(k)]).collect(),
            fixed: (0..p.len()).map(|k| p.fixed[take(k)]).collect(),
        };
        let bonds = self
            .bonds
            .par_iter()
            .map(|&u| {
                let b = model.bonds[u as usize];
                Bond { i: self.inverse[b.i as usize], j: self.inverse[b.j as usize], ..b }
            })
            .collect();
        let user_ids = match &model.user_ids {
            Some(ids) => self.particles.iter().map(|&u| ids[u as usize]).collect(),
            None => self.particles.clone(),
        };
        Model {
            particles,
            bonds,
            params: model.params.clone(),
            reference_x: model.reference_x.as_ref().map(gather),
            user_ids: Some(user_ids),
            // `choose` never renumbers a model with clumps (their members are ranges).
            clumps: Vec::new(),
        }
    }

    /// A state in the engine's order, in the user's.
    pub fn to_user<T: Copy + Send + Sync>(&self, state: Vec<T>) -> Vec<T> {
        self.inverse.par_iter().map(|&k| state[k as usize]).collect()
    }

    /// A break in the engine's numbering, in the user's.
    pub fn break_to_user(&self, e: BreakEvent) -> BreakEvent {
        BreakEvent {
            bond: self.bonds[e.bond as usize],
            i: self.particles[e.i as usize],
            j: self.particles[e.j as usize],
            ..e
        }
    }

    /// An engine error naming an engine particle, naming the user's.
    pub fn error_to_user(&self, e: EngineError) -> EngineError {
        let user = |k: usize| self.particles.get(k).map_or(k, |&u| u as usize);
        match e {
            EngineError::RrpExactCondition { particle, step, t, value } => {
                EngineError::RrpExactCondition { particle: user(particle), step, t, value }
            }
            EngineError::NonFinite { particle, step, t, what } => {
                EngineError::NonFinite { particle: user(particle), step, t, what }
            }
            EngineError::OutOfRange { particle, step, position } => {
                EngineError::OutOfRange { particle: user(particle), step, position }
            }
            EngineError::EnergyGuard { step, t, error, limit, particle, force } => {
                EngineError::EnergyGuard { step, t, error, limit, particle: particle.map(user), force }
            }
            EngineError::NoRollback { error, rollback } => EngineError::NoRollback {
                error: Box::new(self.error_to_user(*error)),
                rollback: Box::new(self.error_to_user(*rollback)),
            },
            other => other,
        }
    }
}

/// `e` in the user's numbering when the engine that raised it ran in `order`.
pub fn error_to_user(order: Option<&Order>, e: EngineError) -> EngineError {
    match order {
        Some(o) => o.error_to_user(e),
        None => e,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::integrator::Kinematics;
    use crate::model::Params;
    use glam::DQuat;

    /// A 3-D grid of `m³` particles numbered row-major, bonded to their +x neighbours, with
    /// distinct masses, radii and velocities so that a wrong gather shows.
    pub(crate) fn grid(m: usize) -> Model {
        let mut p = Particles::default();
        for k in 0..m * m * m {
            let (x, y, z) = (k % m, (k / m) % m, k / (m * m));
            let f = k as f64;
            p.push(
                DVec3::new(x as f64, y as f64, z as f64),
                DVec3::new(f, -f, 2.0 * f),
                DQuat::IDENTITY,
                DVec3::new(0.0, 0.0, f),
                1.0 + f,
                2.0 + f,
                0.4 + f * 1e-6,
                k % 7 == 0,
            );
        }
        let pairs: Vec<(u32, u32)> =
            (0..m * m * m).filter(|k| k % m + 1 < m).map(|k| (k as u32 + 1, k as u32)).collect();
        Model::new(p, &pairs, Params::default())
    }

    #[test]
    fn an_order_permutes_particles_and_bonds_consistently() {
        let model = grid(6);
        let o = Order::spatial(&model);
        let e = o.apply(&model);
        // Particles: the engine's particle k is the user's particles[k].
        for k in 0..e.particles.len() {
            let u = o.user_particle(k);
            assert_eq!(o.engine_particle(u), k);
            assert_eq!(e.particles.x[k], model.particles.x[u]);
            assert_eq!(e.particles.v[k], model.particles.v[u]);
            assert_eq!(e.particles.mass[k], model.particles.mass[u]);
            assert_eq!(e.particles.radius[k], model.particles.radius[u]);
            assert_eq!(e.particles.fixed[k], model.particles.fixed[u]);
        }
        // Bonds: same ends (mapped), same orientation and reference data, sorted by lower end.
        for (k, b) in e.bonds.iter().enumerate() {
            let ub = model.bonds[o.bonds[k] as usize];
            assert_eq!((o.user_particle(b.i as usize), o.user_particle(b.j as usize)), (ub.i as usize, ub.j as usize));
            assert_eq!((b.dhat0, b.l0), (ub.dhat0, ub.l0));
        }
        let lower: Vec<u32> = e.bonds.iter().map(|b| b.i.min(b.j)).collect();
        assert!(lower.windows(2).all(|w| w[0] <= w[1]), "bonds sorted by their lower end");
        // The reordered model's bonds are those `Model::new` makes from its positions, so the
        // engines still find per-particle reference data.
        assert!(e.reference_positions().is_some());
        assert_eq!(e.user_ids.as_deref(), Some(&o.particles[..]));
        // States and breaks map back.
        let state: Vec<Kinematics> = (0..e.particles.len())
            .map(|k| Kinematics { x: e.particles.x[k], v: e.particles.v[k], q: e.particles.q[k], w: e.particles.w[k] })
            .collect();
        let back = o.to_user(state);
        for (u, s) in back.iter().enumerate() {
            assert_eq!((s.x, s.v), (model.particles.x[u], model.particles.v[u]));
        }
        let ev = BreakEvent {
            step: 3,
            t: 0.3,
            bond: 5,
            i: e.bonds[5].i,
            j: e.bonds[5].j,
            mode: 1,
            x: DVec3::ZERO,
            energy: 1.0,
        };
        let u = o.break_to_user(ev);
        let ub = model.bonds[u.bond as usize];
        assert_eq!((u.i, u.j), (ub.i, ub.j));
    }

    #[test]
    fn the_order_does_not_depend_on_the_input_numbering() {
        let model = grid(7);
        let n = model.particles.len();
        // A fixed shuffle of the user's numbering.
        let perm: Vec<u32> = crate::rng::permutation(n, 7).into_iter().map(|k| k as u32).collect();
        let shuffle = Order::from_parts(perm, (0..model.bonds.len() as u32).collect(), n, model.bonds.len()).unwrap();
        let shuffled = shuffle.apply(&model);
        let (a, b) = (Order::spatial(&model).apply(&model), Order::spatial(&shuffled).apply(&shuffled));
        assert_eq!(a.particles, b.particles);
        assert_eq!(a.bonds, b.bonds);
    }

    #[test]
    fn auto_sorts_a_scattered_model_and_leaves_a_local_one() {
        let model = grid(20); // 8000 particles, above AUTO_MIN_PARTICLES
        let (none, measured) = Order::choose(&model, OrderChoice::Auto);
        assert!(none.is_none(), "row-major grid: local ({measured:?})");
        assert_eq!(measured, Some(scatter(&model.particles.x)));
        assert_eq!(Order::choose(&model, OrderChoice::Input), (None, None));
        assert!(Order::choose(&model, OrderChoice::Spatial).0.is_some());
        let n = model.particles.len();
        let perm: Vec<u32> = (0..n as u32).map(|k| (k * 4099) % n as u32).collect(); // 4099 prime to 8000
        let scattered = Order::from_parts(perm, (0..model.bonds.len() as u32).collect(), n, model.bonds.len())
            .unwrap()
            .apply(&model);
        let f = scatter(&scattered.particles.x);
        assert!(f > AUTO_THRESHOLD, "a strided numbering is scattered: {f}");
        let o = Order::choose(&scattered, OrderChoice::Auto).0.expect("auto sorts it");
        assert_eq!(scatter(&o.apply(&scattered).particles.x), 0.0);
    }

    #[test]
    fn weibull_scales_follow_the_users_numbering() {
        let mut model = grid(6);
        model.params.rupture = Some(crate::interactions::Rupture {
            inv_thresholds: [1.0, 0.0, 0.0, 0.0],
            rule: Default::default(),
            weibull: Some((3.0, 11)),
        });
        let o = Order::spatial(&model);
        let e = o.apply(&model);
        let (user, engine) = (model.bond_scales(), e.bond_scales());
        for (k, s) in engine.iter().enumerate() {
            assert_eq!(*s, user[o.bonds[k] as usize], "engine bond {k}");
        }
        // The scales are distinct, so a draw from the engine's indices would show.
        let e_wrong = Model { user_ids: None, ..e.clone() };
        assert_ne!(e_wrong.bond_scales(), engine);
        // An order applied on top of another keeps the first user's numbering.
        let o2 = Order::spatial(&e);
        let twice = o2.apply(&e).bond_scales();
        for (k, s) in twice.iter().enumerate() {
            assert_eq!(*s, user[o.bonds[o2.bonds[k] as usize] as usize], "bond {k} of the second order");
        }
    }

    #[test]
    fn reference_positions_and_errors_follow_the_order() {
        // A model that has moved on since its bonds were made (as resumed from a checkpoint):
        // the engines form d0 from the permuted reference positions, so they must stay paired
        // with the permuted bonds.
        let mut model = grid(6);
        model.reference_x = Some(model.particles.x.clone());
        for (k, x) in model.particles.x.iter_mut().enumerate() {
            *x += DVec3::new(0.01 * k as f64, 0.0, -0.02);
        }
        assert!(model.reference_positions().is_some());
        let o = Order::spatial(&model);
        let e = o.apply(&model);
        assert!(e.reference_positions().is_some(), "bonds still match the permuted reference positions");
        for k in 0..e.particles.len() {
            assert_eq!(e.reference_x.as_ref().unwrap()[k], model.reference_x.as_ref().unwrap()[o.user_particle(k)]);
            assert_eq!(e.particles.x[k], model.particles.x[o.user_particle(k)]);
        }
        // Engine errors name the user's particle.
        let k = (0..e.particles.len()).find(|&k| o.user_particle(k) != k).expect("the order moves some particle");
        let err = error_to_user(
            Some(&o),
            EngineError::NonFinite { particle: k, step: 3, t: 0.3, what: "a non-finite force".into() },
        );
        assert!(matches!(err, EngineError::NonFinite { particle, .. } if particle == o.user_particle(k)), "{err}");
        let err = o.error_to_user(EngineError::OutOfRange { particle: k, step: 1, position: "far".into() });
        assert!(matches!(err, EngineError::OutOfRange { particle, .. } if particle == o.user_particle(k)));
        let err = o.error_to_user(EngineError::RrpExactCondition { particle: k, step: 1, t: 0.1, value: 2.0 });
        assert!(matches!(err, EngineError::RrpExactCondition { particle, .. } if particle == o.user_particle(k)));
        // Both errors of a failed return to the last good state, too.
        let j = (0..e.particles.len()).rev().find(|&j| o.user_particle(j) != j && j != k).expect("another one");
        let err = o.error_to_user(EngineError::NoRollback {
            error: Box::new(EngineError::OutOfRange { particle: k, step: 1, position: "far".into() }),
            rollback: Box::new(EngineError::NonFinite { particle: j, step: 0, t: 0.0, what: "F = NaN".into() }),
        });
        let EngineError::NoRollback { error, rollback } = err else { panic!("{err}") };
        assert!(matches!(*error, EngineError::OutOfRange { particle, .. } if particle == o.user_particle(k)));
        assert!(matches!(*rollback, EngineError::NonFinite { particle, .. } if particle == o.user_particle(j)));
    }

    #[test]
    fn a_renumbering_takes_one_order_to_the_other() {
        // Two unrelated orders of a model: an engine in the first, renumbered by `relative`,
        // holds the model exactly as one built in the second.
        let model = grid(6);
        let (n, nb) = (model.particles.len(), model.bonds.len());
        let perm: Vec<u32> = crate::rng::permutation(n, 5).into_iter().map(|k| k as u32).collect();
        let bperm: Vec<u32> = crate::rng::permutation(nb, 6).into_iter().map(|k| k as u32).collect();
        let first = Order::from_parts(perm, bperm, n, nb).unwrap();
        let second = Order::spatial(&model);
        let rel = Order::relative(Some(&first), &second);
        let (via, direct) = (rel.apply(&first.apply(&model)), second.apply(&model));
        assert_eq!(via.particles.x, direct.particles.x);
        assert_eq!(via.particles.mass, direct.particles.mass);
        assert_eq!(via.user_ids, direct.user_ids, "the users' numbering is kept through both");
        let ends = |m: &Model| m.bonds.iter().map(|b| (b.i, b.j, b.l0.to_bits())).collect::<Vec<_>>();
        assert_eq!(ends(&via), ends(&direct));
        // From the user's own order, the renumbering is the order itself.
        assert_eq!(Order::relative(None, &second), second);
    }

    #[test]
    fn a_run_is_resorted_once_its_order_has_mixed() {
        let model = grid(20); // 8000 particles in row-major order: local
        let x = &model.particles.x;
        let (none, s) = Order::resort(&model, x, None);
        assert!(none.is_none() && s < AUTO_THRESHOLD, "row-major: {s}");
        // The particles have moved to one another's places at random: the order is scattered.
        let n = x.len();
        let moved: Vec<DVec3> = crate::rng::permutation(n, 3).into_iter().map(|k| x[k]).collect();
        let (new, s) = Order::resort(&model, &moved, None);
        assert!(s > AUTO_THRESHOLD, "mixed: {s}");
        let new = new.expect("re-sorted");
        assert_eq!(new.particles, morton_sequence(&moved), "the Morton order of where they are now");
        // Measured in the engine's order: an engine already in the new order is local.
        let (again, s) = Order::resort(&model, &moved, Some(&new));
        assert!(again.is_none() && s == 0.0, "in its own order: {s}");
        // ... and one still in the old spatial order is not.
        let old = Order::spatial(&model);
        assert!(Order::resort(&model, &moved, Some(&old)).1 > AUTO_THRESHOLD);
    }

    #[test]
    fn only_auto_and_spatial_check_during_a_run() {
        assert!(!OrderChoice::Input.checks_during_run(1 << 20));
        assert!(!OrderChoice::Auto.checks_during_run(AUTO_MIN_PARTICLES - 1));
        assert!(OrderChoice::Auto.checks_during_run(AUTO_MIN_PARTICLES));
        assert!(OrderChoice::Spatial.checks_during_run(10));
    }

    #[test]
    fn a_row_major_block_counts_as_local() {
        // A lattice numbered row-major (as files from other tools often are), x fastest: the
        // far neighbours are the steps along z, 3072 indices apart.
        let (a, b, c) = (64usize, 48usize, 40usize);
        let x: Vec<DVec3> =
            (0..a * b * c).map(|k| DVec3::new((k % a) as f64, ((k / a) % b) as f64, (k / (a * b)) as f64)).collect();
        let f = scatter(&x);
        assert!(f > 0.05 && f < 0.5, "row-major 64×48×40: {f}");
    }

    #[test]
    fn a_renumbering_must_fit_the_engine() {
        let model = grid(4);
        let (n, nb) = (model.particles.len(), model.bonds.len());
        let o = Order::spatial(&model);
        assert!(o.check_renumbering(&model, n, nb).is_ok());
        let e = o.check_renumbering(&model, n + 1, nb).unwrap_err().to_string();
        assert!(
            e.contains(&format!("renumbering of {n} particles")) && e.contains(&format!("engine of {}", n + 1)),
            "{e}"
        );
        assert!(o.check_renumbering(&grid(3), n, nb).is_err(), "a model of another size");
    }

    #[test]
    fn orders_from_checkpoints_are_checked() {
        assert!(Order::from_parts(vec![1, 0, 2], vec![0], 3, 1).is_ok());
        let e = Order::from_parts(vec![1, 1, 2], vec![0], 3, 1).unwrap_err();
        assert!(e.contains("particle order is not a permutation"), "{e}");
        let e = Order::from_parts(vec![0, 1, 3], vec![0], 3, 1).unwrap_err();
        assert!(e.contains("entry 2 is 3"), "{e}");
        let e = Order::from_parts(vec![0, 1], vec![0], 3, 1).unwrap_err();
        assert!(e.contains("2 entries for 3 particles"), "{e}");
        let e = Order::from_parts(vec![0, 1, 2], vec![], 3, 1).unwrap_err();
        assert!(e.contains("bond order"), "{e}");
    }
}

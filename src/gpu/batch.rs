//! The replica layout of a batch, defined once: where each replica's particles, bonds and walls
//! lie in the batch's arrays, the chunk tables of the segmented diagnostics reduction, the bytes
//! a batch takes on the device, and how a large study is split into batches that fit.
//!
//! Replicas are concatenated in order: replica r's particles are `p_start[r] ..` (bond ends and
//! the incidence are offset on upload), its bonds `b_start[r] ..`, its walls `wall_start[r] ..`.
//! Each particle carries its replica in bits 1.. of its `fixed` word (bit 0: fixed).

use super::shader::HIST_SLOTS;
use super::shader::{NQ, NW, RSTATUS_LEN, SCAN_WG, STATUS_LEN, WATCH_PER_LANE, WG};
use super::sizes::{
    INITIAL_NBR_CAPACITY, MAX_BREAK_RECORDS, MIN_BUFFER, MIN_NBR_CAPACITY, bond_out_elem, particle_elem, real_size,
};
use super::watch::watch_gpu_size;
use crate::engine::Precision;
use crate::model::Model;

/// Ranges of every replica in the batch's arrays.
/// Whether `dissipate` reads each bond's other end (`inc_peer`) for a model dissipating by `d`:
/// its binder's dashpots, or its bonded pairs' contact dashpots and sliders, which go with the
/// bonds.
pub(crate) fn reads_bond_peers(d: &crate::interactions::Dissipation) -> bool {
    d.binder() || d.pairs()
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchLayout {
    pub p_start: Vec<u32>,
    pub n_particles: Vec<u32>,
    pub b_start: Vec<u32>,
    pub n_bonds: Vec<u32>,
    pub wall_start: Vec<u32>,
    /// Bonds of the replica may break.
    pub rupture: Vec<bool>,
    /// First word of the replica's broken flags (one bit per bond, each replica from a word
    /// boundary, so that restoring one replica's words leaves the others' bits alone).
    pub broken_word: Vec<u32>,
    /// Totals of the batch.
    pub n: u32,
    pub nb: u32,
    pub walls: u32,
    /// Words of broken flags of the batch.
    pub broken_words: u32,
}

impl BatchLayout {
    pub fn new(models: &[&Model]) -> BatchLayout {
        let mut l = BatchLayout::default();
        for m in models {
            l.p_start.push(l.n);
            l.b_start.push(l.nb);
            l.wall_start.push(l.walls);
            l.n_particles.push(m.particles.len() as u32);
            l.n_bonds.push(m.bonds.len() as u32);
            l.rupture.push(m.params.rupture.is_some());
            l.broken_word.push(l.broken_words);
            l.broken_words += broken_words(m.bonds.len() as u64) as u32;
            l.n += m.particles.len() as u32;
            l.nb += m.bonds.len() as u32;
            l.walls += m.params.walls.len() as u32;
        }
        l
    }

    pub fn replicas(&self) -> usize {
        self.p_start.len()
    }

    /// Replica owning batch bond k.
    pub fn replica_of_bond(&self, k: u32) -> usize {
        self.b_start.partition_point(|&s| s <= k).saturating_sub(1).min(self.replicas().saturating_sub(1))
    }

    /// Level-0 chunks of replica r: one workgroup per WG replica-relative items (particle t and
    /// bond t together, as for one model alone).
    pub fn chunks(&self, r: usize) -> u32 {
        chunks(self.n_particles[r], self.n_bonds[r])
    }

    /// The chunk tables of the segmented reduction (shaders/reduce.wgsl): level 0, one entry
    /// per workgroup (replica, first replica-relative item); then one table per further level,
    /// one entry per workgroup (first input record, count, copy), until every replica has one
    /// record. Outputs of every level are laid out replica after replica, so the last level's
    /// record r is replica r's. A replica's own entries depend only on its own sizes: its sums
    /// run in the same order in any batch.
    pub fn reduce_tables(&self) -> (Vec<[u32; 4]>, Vec<Vec<[u32; 4]>>) {
        tree_tables((0..self.replicas()).map(|r| self.chunks(r)).collect())
    }

    /// The chunk tables of the watch's segmented sums (shaders/watch.wgsl), as `reduce_tables`
    /// but over the particles only (the particles carry their bonds' shares), `WATCH_PER_LANE`
    /// particles per lane at level 0 (entry: replica, first replica-relative particle).
    pub fn watch_tables(&self) -> (Vec<[u32; 4]>, Vec<Vec<[u32; 4]>>) {
        let per_group = WG * WATCH_PER_LANE;
        let (mut level0, levels) =
            tree_tables(self.n_particles.iter().map(|&n| n.max(1).div_ceil(per_group)).collect());
        for e in &mut level0 {
            e[1] = e[1] / WG * per_group;
        }
        (level0, levels)
    }
}

/// Chunk tables of a segmented tree sum whose replica r has `counts[r]` level-0 workgroups of
/// WG items (`reduce_tables`, `watch_tables`): level 0, one entry (replica, first
/// replica-relative item) per workgroup; then per further level one entry (first input record,
/// count, copy) per workgroup, until every replica has one record.
fn tree_tables(mut counts: Vec<u32>) -> (Vec<[u32; 4]>, Vec<Vec<[u32; 4]>>) {
    let mut level0 = Vec::new();
    for (r, &c) in counts.iter().enumerate() {
        level0.extend((0..c).map(|k| [r as u32, k * WG, 0, 0]));
    }
    let mut levels = Vec::new();
    while counts.iter().any(|&c| c > 1) {
        let mut table = Vec::new();
        let mut at = 0u32;
        for c in counts.iter_mut() {
            if *c > 1 {
                let out = c.div_ceil(WG);
                table.extend((0..out).map(|k| [at + k * WG, WG.min(*c - k * WG), 0, 0]));
                at += *c;
                *c = out;
            } else {
                table.push([at, 1, 1, 0]);
                at += 1;
            }
        }
        levels.push(table);
    }
    (level0, levels)
}

/// Words of broken flags for `nb` bonds (one bit each).
pub fn broken_words(nb: u64) -> u64 {
    nb.div_ceil(32)
}

fn chunks(n: u32, nb: u32) -> u32 {
    n.max(nb).max(1).div_ceil(WG)
}

/// Volume fraction of a close packing of equal spheres, π/√18: the densest a model's spheres
/// around one particle can be (`BatchTotals::initial_nbr_capacity`).
const CLOSE_PACKING: f64 = 0.7405;

/// What the buffer sizes of a batch depend on, accumulated replica by replica.
#[derive(Clone, Debug, Default)]
pub struct BatchTotals {
    pub n: u64,
    pub nb: u64,
    pub replicas: u64,
    pub walls: u64,
    pub rupture: bool,
    /// Some replica's bonds disagree on a particle's reference attitude, so the batch stores
    /// them per bond (`Model::reference_attitudes`).
    pub bond_attitudes: bool,
    /// Some replica's particles are not where its bonds were made, so the batch stores the
    /// reference directions and lengths per bond (`Model::reference_positions`).
    pub bond_refs: bool,
    /// Some replica scales its rupture thresholds per bond (Weibull): `bond_scale` is real.
    pub weibull: bool,
    /// Some replica dissipates (MODEL §10): the `dload_*` arrays and their backups are real.
    pub dissipation: bool,
    /// Some replica reads the bonds' other ends (`reads_bond_peers`): `inc_peer` (4 bytes per
    /// incidence entry) is real.
    pub bond_peers: bool,
    /// Bonds whose pairs the contact lists leave out (all of them, unless an engine is told to
    /// list them, `GpuOptions::list_bonded_pairs`): where some, `bonded` (4 bytes per incidence
    /// entry) is real.
    pub unlisted_bonds: u64,
    /// Some replica has pair friction, some wall friction (the contact history is real), and
    /// the most walls of a replica. With pair friction and bonds left out of the lists
    /// (`bond_history`), the bonded pairs' history beside the incidence (`inc_xi`) is real too.
    pub pair_friction: bool,
    pub wall_friction: bool,
    pub max_walls: u64,
    /// The widest contact-list skin of a replica (`Params::skin`, units of its r_max).
    pub max_skin: f64,
    /// Words of broken flags (each replica's from a word boundary).
    pub broken_words: u64,
    /// Records out of each reduction level (level 0 first), over all replicas.
    pub level_records: Vec<u64>,
    /// The same for the watch's sums (`BatchLayout::watch_tables`).
    pub watch_records: Vec<u64>,
}

impl BatchTotals {
    /// Whether the bonded pairs' tangential history beside the incidence (`inc_xi`, a vec4 per
    /// incidence entry, and its backup) is real: pair friction, and bonds the lists leave out.
    pub fn bond_history(&self) -> bool {
        self.pair_friction && self.unlisted_bonds > 0
    }

    pub fn of(models: &[&Model]) -> BatchTotals {
        let mut t = BatchTotals::default();
        for m in models {
            t.add(m);
        }
        t
    }

    pub fn add(&mut self, m: &Model) {
        self.add_with(m, m.reference_attitudes().is_none(), m.reference_positions().is_none());
    }

    /// `add` for a model whose reference checks (`Model::reference_attitudes`,
    /// `reference_positions`: passes over every bond) the caller has made: whether its bonds
    /// need per-bond attitudes and per-bond directions and lengths.
    pub fn add_with(&mut self, m: &Model, bond_attitudes: bool, bond_refs: bool) {
        let c = chunks(m.particles.len() as u32, m.bonds.len() as u32) as u64;
        add_levels(&mut self.level_records, c, self.replicas);
        let c = (m.particles.len() as u64).max(1).div_ceil((WG * WATCH_PER_LANE) as u64);
        add_levels(&mut self.watch_records, c, self.replicas);
        self.n += m.particles.len() as u64;
        self.nb += m.bonds.len() as u64;
        self.replicas += 1;
        self.walls += m.params.walls.len() as u64;
        self.rupture |= m.params.rupture.is_some();
        self.weibull |= m.params.weibull();
        self.dissipation |= m.params.dissipation.is_some();
        let d = m.params.dissipation.unwrap_or_default();
        self.pair_friction |= d.mu > 0.0;
        self.bond_peers |= reads_bond_peers(&d);
        self.unlisted_bonds += m.bonds.len() as u64;
        self.wall_friction |= d.mu_wall > 0.0;
        self.max_walls = self.max_walls.max(m.params.walls.len() as u64);
        self.max_skin = self.max_skin.max(m.params.skin);
        self.broken_words += broken_words(m.bonds.len() as u64);
        self.bond_attitudes |= bond_attitudes;
        self.bond_refs |= bond_refs;
    }

    /// Each neighbour list's capacity to start with: `INITIAL_NBR_CAPACITY` less the bonded
    /// partners per particle the lists leave out (on average over the batch), at least
    /// `MIN_NBR_CAPACITY`: 16 for a cloud of loose spheres, 14 for rings, 5 for an fcc solid,
    /// whose lists are empty at rest (its bonded neighbours were 11.5 of its ~12 entries). A
    /// skin wider than the default (`max_skin`) adds the partners a close packing (fraction
    /// 0.74) holds in the wider reach: `0.74 ((2 + s)³ − (2 + 0.6)³)` in units of r_max, 7 at
    /// s = 1, 17 at 1.4 (an fcc solid has 6 more within 1.4 at rest, 30 once compressed by
    /// 2 %), 55 at 2.5. An overflow later is exact and gives each list room for its own count.
    pub fn initial_nbr_capacity(&self) -> u32 {
        let left_out = 2 * self.unlisted_bonds / self.n.max(1);
        let reach = |s: f64| (2.0 + s) * (2.0 + s) * (2.0 + s);
        let default = crate::grid::SKIN_FACTOR;
        let wider = if self.max_skin > default { CLOSE_PACKING * (reach(self.max_skin) - reach(default)) } else { 0.0 };
        let start = INITIAL_NBR_CAPACITY as u64 + wider.ceil() as u64;
        start.saturating_sub(left_out).max(MIN_NBR_CAPACITY as u64) as u32
    }

    /// Contact-grid bucket count (power of two ≥ 2N) where a binding can hold its table; an
    /// upper bound of `bucket_count` for memory estimates.
    pub fn buckets(&self) -> u64 {
        crate::grid::bucket_count(self.n as usize) as u64
    }
}

/// Adds a replica of `c` level-0 records (`replicas` before it) to the records of each level of
/// a tree sum (`tree_tables`).
fn add_levels(records: &mut Vec<u64>, mut c: u64, replicas: u64) {
    let mut seq = vec![c];
    while c > 1 {
        c = c.div_ceil(WG as u64);
        seq.push(c);
    }
    // Replicas already there pass one record through levels they did not need.
    while records.len() < seq.len() {
        let k = records.len();
        records.push(if k == 0 { 0 } else { replicas });
    }
    for (k, v) in records.iter_mut().enumerate() {
        *v += seq.get(k).copied().unwrap_or(1);
    }
}

/// Contact-grid bucket count for `n` particles: the power of two ≥ 2n, or the largest power of
/// two whose table (count + 1 entries of 4 bytes) one binding of `max_binding` bytes holds.
/// Fewer buckets than 2n only make the buckets fuller: the grid visits candidates in particle
/// order and checks each one's cell, so results do not depend on the count.
pub fn bucket_count(n: u64, max_binding: u64) -> u64 {
    let fits = (max_binding / 4).saturating_sub(1).max(1);
    (crate::grid::bucket_count(n as usize) as u64).min(1 << fits.ilog2())
}

/// `binding_sizes`' name for the per-particle arrays (which a one-model engine may bind in two
/// parts instead: `sizes::particle_part_len`).
pub const PARTICLE_ARRAYS: &str = "particle arrays (vec4 per particle)";

/// The largest buffers of a batch, one of each kind (what the binding-size checks look at).
/// Arrays bound in parts (`chunked_sizes`) are not among them.
pub fn binding_sizes(t: &BatchTotals, precision: Precision) -> Vec<(&'static str, u64)> {
    let n = t.n;
    let rs = real_size(precision) as u64;
    // The bucket table is not here: `bucket_count` keeps it within a binding.
    let sizes = vec![
        (PARTICLE_ARRAYS, particle_elem(precision) * n),
        ("diagnostics partial sums", NQ as u64 * rs * t.level_records.first().copied().unwrap_or(1)),
        ("neighbour list offsets", 4 * (n + 1)),
        ("replica parameters", super::params::replica_gpu_size(precision) as u64 * t.replicas),
        ("broken flags (a bit per bond)", if t.rupture { 4 * t.broken_words } else { 0 }),
    ];
    sizes
}

/// The buffers bound in parts (`gpu::chunks`: per-bond arrays, incidence, neighbour lists, the
/// contact history's rows): no binding limit, and stored over several buffers where one does
/// not hold them (pages).
pub fn chunked_sizes(t: &BatchTotals, precision: Precision, nbr_capacity: u32) -> Vec<(&'static str, u64)> {
    let rs = real_size(precision) as u64;
    vec![
        ("bond results", bond_out_elem(precision) * t.nb),
        ("bond reference directions and lengths", if t.bond_refs { 4 * rs * t.nb } else { 0 }),
        ("bond reference attitudes", if t.bond_attitudes { 8 * rs * t.nb } else { 0 }),
        ("incidence entries", 8 * t.nb),
        (
            "the bonds' other ends beside them (binder or bonded contacts' damping)",
            if t.bond_peers { 8 * t.nb } else { 0 },
        ),
        ("bonded partners, sorted (pairs left out of the lists)", if t.unlisted_bonds > 0 { 8 * t.nb } else { 0 }),
        ("bonded pairs' contact history (friction)", bond_history_bytes(t, precision)),
        ("neighbour lists", 4 * nbr_capacity as u64 * t.n),
        ("contact history (friction)", history_sizes(t, precision)[2]),
        ("wall contact history (friction)", history_sizes(t, precision)[3]),
    ]
}

/// Bytes of the contact history of MODEL §10's friction (one row per particle, shaders/bindings.wgsl):
/// `hist_count`, `hist_key`, `hist_xi` where some replica has pair friction, `whist` where some
/// has wall friction (0 otherwise: placeholders). The one formula the allocation
/// (`state::plan`) and the estimates use.
pub fn history_sizes(t: &BatchTotals, precision: Precision) -> [u64; 4] {
    let rows = history_rows(precision, t.max_walls);
    let real = [t.pair_friction, t.pair_friction, t.pair_friction, t.wall_friction];
    std::array::from_fn(|k| if real[k] { rows[k] * t.n } else { 0 })
}

/// Whether the bonded pairs' tangential history (`inc_xi`) of a batch of `nb` bonds fits one
/// buffer of `max_buffer` bytes: the incidence's pages overlap, and a copy in an overlap is not
/// the one the host reads, so where it would need several the batch keeps that history in its
/// rows instead (`params::FLAG_BOND_HISTORY` off; the memory estimates still count it).
pub fn bond_history_fits(nb: u64, precision: Precision, max_buffer: u64) -> bool {
    2 * nb * 4 * real_size(precision) as u64 <= max_buffer
}

/// Bytes of the bonded pairs' tangential history (`inc_xi`: ξ of the bond's pair seen from its
/// end i, a vec4 per incidence entry, each end rewriting its own copy) where it is real
/// (`BatchTotals::bond_history`), else 0; its backup is as large.
pub fn bond_history_bytes(t: &BatchTotals, precision: Precision) -> u64 {
    if t.bond_history() { 2 * t.nb * 4 * real_size(precision) as u64 } else { 0 }
}

/// Bytes per particle of `HISTORY_ARRAYS` (`walls` wall slots per particle).
pub fn history_rows(precision: Precision, walls: u64) -> [u64; 4] {
    let v4 = 4 * real_size(precision) as u64;
    [4, 4 * HIST_SLOTS as u64, v4 * HIST_SLOTS as u64, v4 * walls]
}

/// The contact history's arrays, in the order of `history_sizes`.
pub const HISTORY_ARRAYS: [&str; 4] = ["hist_count", "hist_key", "hist_xi", "whist"];

/// Every buffer the state of a batch allocates, with its size as allocated (padded as
/// `DemState` pads it): the same list `DemState::new` plans (a test checks the totals agree),
/// except that the bucket table is counted uncapped (`BatchTotals::buckets`): for a model
/// whose table a binding cannot hold (over 1.6·10⁷ particles on lavapipe, 2.7·10⁸ on an H100)
/// this overestimates the bytes by at most the table's half, on the safe side of a budget.
pub fn planned_sizes(t: &BatchTotals, precision: Precision, nbr_capacity: u32) -> Vec<u64> {
    let pad = |len: u64| len.max(MIN_BUFFER as u64).next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
    let rs = real_size(precision) as u64;
    let (n, nb, r) = (t.n, t.nb, t.replicas.max(1));
    let v4 = 4 * rs * n;
    let nr = if t.rupture { nb } else { 0 };
    let buckets = t.buckets();
    let rec0 = t.level_records.first().copied().unwrap_or(1);
    let rec1 = t.level_records.get(1).copied().unwrap_or(1);
    let status = 4 * (STATUS_LEN as u64 + r * RSTATUS_LEN as u64);
    let table: u64 = t.level_records.iter().sum();
    let mut v = vec![
        16 * 4,                                                   // params (at most)
        super::params::replica_gpu_size(precision) as u64 * r,    // reps
        super::params::wall_gpu_size(precision) as u64 * t.walls, // walls
        v4,
        v4,
        v4,
        v4,
        v4,    // pos, vel, quat, omega, inertial
        4 * n, // fixed
        8 * nb,
        if t.bond_refs { 4 * rs * nb } else { 0 },
        if t.bond_attitudes { 8 * rs * nb } else { 0 }, // bond_ends, bond_ref, bond_q0
        v4,                                             // q_ref
        v4,                                             // ref_pos
        if super::frame::uses_blocks(precision) { 16 * n } else { 0 }, // ref_cell
        4 * (n + 1),
        8 * nb,                                        // incidence
        if t.bond_peers { 8 * nb } else { 0 },         // the bonds' other ends (inc_peer)
        if t.unlisted_bonds > 0 { 8 * nb } else { 0 }, // the sorted bonded partners (bonded)
        4 * (n + 1),                                   // neighbour list offsets
        4 * (n + 1),                                   // halo offsets
        4 * (buckets + 1),
        status,
        v4,                                       // x_ref
        if t.weibull { rs * nb } else { 0 },      // bond_scale
        16 * table,                               // red_table
        16 * t.watch_records.iter().sum::<u64>(), // watch_table
    ];
    v.extend([v4, v4, v4, 12 * rs * nb, 16 * n, 4 * n, 4 * n, 4 * n, 16 * n, v4, 16, 16]);
    v.extend([4 * nbr_capacity as u64 * n, 4 * n, NQ as u64 * rs * rec0, NQ as u64 * rs * rec1]);
    let wrec0 = t.watch_records.first().copied().unwrap_or(1);
    let wrec1 = t.watch_records.get(1).copied().unwrap_or(1);
    let watch = watch_gpu_size(precision) as u64 * r;
    v.extend([NW as u64 * rs * wrec0, NW as u64 * rs * wrec1, watch, 4 * r]); // watch_a, watch_b, watch, flags
    v.push(4 * rs * r); // drift
    let cell_backup = if super::frame::uses_blocks(precision) { 16 * n } else { 0 };
    let nw = if t.rupture { t.broken_words } else { 0 };
    let rec = nr.min(MAX_BREAK_RECORDS);
    v.extend([v4, v4, v4, v4, cell_backup, 4 * nw, 4 * nw, 4 * rs * rec, 16 * rec]); // backups, rupture
    // The dissipative loads (`shader::DLOAD_ARRAYS`, as large as the per-particle arrays), then
    // their backups.
    let dload = if t.dissipation { v4 } else { 0 };
    v.extend([dload; 6]);
    // The contact history and its backup: counts, partners, ξ, walls' ξ.
    let [count, keys, xi, walls] = history_sizes(t, precision);
    v.extend([count, count, keys, keys, xi, xi, walls, walls]);
    // The bonded pairs' history beside the incidence, and its backup.
    let bond_xi = bond_history_bytes(t, precision);
    v.extend([bond_xi, bond_xi]);
    // Scan levels: auxiliary arrays, the top-sum placeholder and one uniform per level.
    let block = 2 * SCAN_WG as u64;
    let mut lens = vec![buckets + 1];
    while *lens.last().unwrap_or(&1) > block {
        let l = lens.last().copied().unwrap_or(1).div_ceil(block);
        lens.push(l);
    }
    v.extend(lens.iter().skip(1).map(|&len| 4 * len));
    v.push(16);
    v.extend(lens.iter().map(|_| 16));
    // Reduction uniforms (level 0 and every further level) and the readback buffer.
    v.extend(t.level_records.iter().map(|_| 16));
    v.extend(t.watch_records.iter().map(|_| 16));
    v.push(status + NQ as u64 * rs * r + watch + 4 * r);
    v.into_iter().map(pad).collect()
}

/// Bytes of device memory the state of a batch of these models takes (the neighbour lists at
/// `nbr_capacity`; they may grow later within the memory budget).
pub fn batch_bytes(models: &[&Model], precision: Precision, nbr_capacity: u32) -> u64 {
    planned_sizes(&BatchTotals::of(models), precision, nbr_capacity).iter().sum()
}

/// Splits consecutive replicas into batches that each fit: every buffer within `max_binding`
/// bytes (the device's storage-binding limit) and, with a memory budget, the batch's bytes
/// (`batch_bytes` at the initial neighbour capacity) within it. Greedy: each batch takes as
/// many replicas as fit, in order, so the ranges cover `0..models.len()` in order. A replica
/// that does not fit even alone gets a batch of its own (building it then reports why).
/// `GpuEngine::batch_limits` gives an adapter's `limits`.
pub fn split_batches(
    models: &[&Model],
    precision: Precision,
    limits: (u64, Option<u64>),
) -> Vec<std::ops::Range<usize>> {
    let (max_binding, budget) = limits;
    let fits = |t: &BatchTotals| {
        let cap = t.initial_nbr_capacity();
        // A study's batches stay within one binding per array (no chunks needed for them).
        binding_sizes(t, precision).iter().chain(&chunked_sizes(t, precision, cap)).all(|&(_, s)| s <= max_binding)
            && budget.is_none_or(|b| planned_sizes(t, precision, cap).iter().sum::<u64>() <= b)
    };
    let mut out = Vec::new();
    let mut start = 0;
    let mut totals = BatchTotals::default();
    for (k, m) in models.iter().enumerate() {
        let mut with = totals.clone();
        with.add(m);
        if k > start && !fits(&with) {
            out.push(start..k);
            start = k;
            totals = BatchTotals::default();
            totals.add(m);
        } else {
            totals = with;
        }
    }
    if start < models.len() {
        out.push(start..models.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_table_fits_its_binding() {
        // 2·10⁷ rounds up to 2²⁵ buckets, whose table (2²⁵ + 1 entries of 4 B) is 4 B more
        // than lavapipe's 128 MiB binding: capped at 2²⁴. Small models keep 2n rounded up.
        let lavapipe = 128 << 20;
        assert_eq!(bucket_count(10_000_000, lavapipe), 1 << 24);
        assert_eq!(bucket_count(8_000_000, lavapipe), 1 << 24);
        assert_eq!(bucket_count(100, lavapipe), 256);
        assert_eq!(bucket_count(0, lavapipe), 2);
        for (n, max) in [(10_000_000u64, lavapipe), (3000, 4096), (1 << 30, 2047 << 20)] {
            let b = bucket_count(n, max);
            assert!(b.is_power_of_two() && 4 * (b + 1) <= max, "{n} in {max}: {b}");
        }
    }
}

//! The bench's models of memory traffic per step (bytes a step moves, from the engines' data
//! layouts), for its bytes per particle-step and bandwidth fraction.

use crate::engine::Precision;

/// Estimated bytes of memory traffic of one step of the CPU engine (f64), from its data layout
/// (`src/engine/cpu/`): every array a pass streams through counted once per pass, and what the
/// bond pass touches at the bond ends (positions, attitudes, the force and moment sums it adds
/// into) counted once per particle: bonds join nearby indices, so those accesses mostly hit the
/// cache. Not counted: the bond ends stored past a range boundary on several threads (52 B
/// each, written and read; a few % of the ends), and neighbour-list rebuilds (every ~0.3 r_max
/// of motion). `partners` is the number of contact neighbour-list entries.
pub fn cpu_bytes_per_step(n: usize, bonds: usize, partners: usize) -> f64 {
    const KIN: f64 = 104.0; // x, v, q, Ω
    const ACC: f64 = 48.0; // force, moment
    let per_particle = (KIN + ACC + KIN) // pre-force: read state and forces, write state
        + (24.0 + 24.0) // neighbour-list staleness check: x and x at the last rebuild
        + 56.0 + 2.0 * ACC // bond pass: the ends' x and q, their sums read and written
        + (4.0 + 4.0 + 24.0 + 2.0 * ACC) // particle pass: stored-end and list offsets, x, the sums
        + (48.0 + ACC + 48.0); // post-force: read v, Ω and forces, write v, Ω
    let per_bond = 40.0 + 1.0 + 1.0; // bond pass: ends, d̂0, L0; state read and written
    let per_partner = 4.0; // the list entry (the partner's position is counted as cached)
    per_particle * n as f64 + per_bond * bonds as f64 + per_partner * partners as f64
}

/// The bytes MODEL §10 adds to a CPU step (`cpu_bytes_per_step`'s conventions), for `walls`
/// walls, `entries` contacts the particle pass visits per step (its list's entries, and the
/// bonded partners where the list holds them) and `bonded` pairs the bond pass evaluates (the
/// bonds, where the lists leave their pairs out): the dissipative sums zeroed, gathered by the
/// bond pass (which also reads the ends' v and Ω), read and written by the particle pass and
/// read by the integration pass (48 B each way); with friction between spheres, each visited
/// contact's ξ read and its successor written (48 B, in the rows or per bond), counted as if
/// every visited pair touched (an upper bound: the interior of a solid has them all touching or
/// nearly); with friction at the walls, each particle's ξ per wall likewise. Not counted:
/// `v_eval`, written in an advance's last step only.
pub fn cpu_dissipation_bytes_per_step(
    n: usize,
    entries: usize,
    bonded: usize,
    walls: usize,
    d: &crate::interactions::Dissipation,
) -> f64 {
    const ACC: f64 = 48.0;
    let per_particle = ACC + (48.0 + 2.0 * ACC) + 2.0 * ACC + ACC;
    let pairs = if d.mu > 0.0 { 48.0 * (entries + bonded) as f64 } else { 0.0 };
    let wall = if d.mu_wall > 0.0 { 48.0 * walls as f64 } else { 0.0 };
    (per_particle + wall) * n as f64 + pairs
}

/// Estimated bytes of memory traffic of one step of the GPU engine, from its buffer layout
/// (`src/gpu/state/plan.rs`: vec4 arrays of reals `rs` bytes wide per lane) and what each kernel reads
/// and writes: `integrate` reads pos, vel, quat, omega, inertial, force, moment and writes the
/// first four (and its second half reads vel, omega, inertial, force, moment and writes vel,
/// omega); the staleness check reads pos and x_ref; `bonds` reads the bond's ends, the ends'
/// pos, quat, reference attitude q_ref and reference position ref_pos (with its block in f32;
/// counted once per particle: a particle's bonds read them from nearby threads), and writes 12
/// reals; `particle` reads the incidence (4 bytes per particle, 8 per
/// bond), each bond result once per end (2 × 12 reals), pos, the list count and entries (with
/// the bonded partners the lists leave out: `partners` counts both, 4 bytes each), and
/// writes force, moment and pot. In f32, positions carry a block (`gpu::frame`, vec4<i32>) that
/// `integrate`, the bond ends and the particle kernel read with pos. Grid rebuilds and the
/// diagnostics reduction are not counted.
pub fn gpu_bytes_per_step(n: usize, bonds: usize, partners: usize, precision: Precision) -> f64 {
    let rs = match precision {
        Precision::F32 => 4.0,
        Precision::F64 => 8.0,
    };
    let v4 = 4.0 * rs;
    let blocks = if crate::gpu::frame::uses_blocks(precision) { 3.0 * 16.0 } else { 0.0 };
    let per_particle = blocks
        + 11.0 * v4 // integrate, first half
        + 2.0 * v4 // staleness check
        + 4.0 * v4 + blocks / 3.0 // bond ends' pos, quat, reference attitude and position
        + 4.0 + v4 + 4.0 + 3.0 * v4 // particle kernel: offsets, pos, list count, force/moment/pot
        + 7.0 * v4; // integrate, second half
    let per_bond = 8.0 + 12.0 * rs + 8.0 + 24.0 * rs;
    per_particle * n as f64 + per_bond * bonds as f64 + 4.0 * partners as f64
}

/// The bytes MODEL §10's dashpots add to a GPU step (`gpu_bytes_per_step`'s conventions):
/// `dissipate` reads the particle's pos (and block), vel, omega, inertial, its list count and
/// offset, each of its `partners` list entries (with the bonded partners where the lists hold
/// them) and, per bond end, the incidence entry and the bond's ends (the partners' and ends'
/// arrays counted as cached), and writes three vec4 of `dload_*`; the particle
/// kernel reads and writes two of them (loads and ledger lanes) and writes the ledger at the
/// evaluated step into the third's lane w (one real); the watch reads the third (the walls'
/// force and that ledger).
///
/// With friction between spheres, each particle's history count (read and written) and, per
/// partner visited, its history entry (partner index and ξ, read and written), counted as if
/// every visited pair touched (an upper bound); where the lists leave bonded pairs out
/// (`unlisted`), each bond end's ξ beside the incidence (`inc_xi`, read and written); with
/// friction at the walls, each particle's ξ per wall, read and written.
pub fn gpu_dissipation_bytes_per_step(
    n: usize,
    bonds: usize,
    partners: usize,
    walls: usize,
    d: &crate::interactions::Dissipation,
    precision: Precision,
    unlisted: bool,
) -> f64 {
    let rs = match precision {
        Precision::F32 => 4.0,
        Precision::F64 => 8.0,
    };
    let v4 = 4.0 * rs;
    let block = if crate::gpu::frame::uses_blocks(precision) { 16.0 } else { 0.0 };
    let mut per_particle = 4.0 * v4 + block + 8.0 + 3.0 * v4 + 4.0 * v4 + rs + v4;
    let mut per_partner = 4.0;
    let mut per_bond = 24.0;
    if d.mu > 0.0 {
        per_particle += 8.0;
        per_partner += 2.0 * (4.0 + v4);
        if unlisted {
            per_bond += 2.0 * 2.0 * v4;
        }
    }
    if d.mu_wall > 0.0 {
        per_particle += 2.0 * v4 * walls as f64;
    }
    per_particle * n as f64 + per_bond * bonds as f64 + per_partner * partners as f64
}

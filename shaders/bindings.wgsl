// Storage bindings of the simulation state, declared once for every kernel. The host binds
// buffers by these names (src/gpu/state.rs), reading each kernel's used bindings from naga, so a
// kernel binds only what it touches. Groups by owner: 0 = parameters, 1 = particles,
// 2 = bonds, contact grid and status. No vec3 in storage: vec4 with the fourth lane documented.

@group(0) @binding(0) var<uniform> params: SimParams;
/// Every replica's walls, replica r's at reps[r].wall_start .. + reps[r].n_walls.
@group(0) @binding(1) var<storage, read> walls: array<WallGpu>;
/// Per-replica parameters and ranges, indexed by replica.
@group(0) @binding(2) var<storage, read> reps: array<ReplicaGpu>;

/// Position as an offset inside the particle's block `cell[i]` (xyz), and radius (w): the
/// position is B·edge + o from the replica's origin (src/gpu/frame.rs), so f32 resolves it to
/// ~1e-7 of a cell edge wherever the model lies. Without BLOCKS (f64), the offset from the
/// origin.
@group(1) @binding(0) var<storage, read_write> pos: array<vec4<real>>;
/// Velocity (xyz).
@group(1) @binding(1) var<storage, read_write> vel: array<vec4<real>>;
/// Attitude quaternion (x, y, z, w).
@group(1) @binding(2) var<storage, read_write> quat: array<vec4<real>>;
/// Spatial angular velocity Ω (xyz).
@group(1) @binding(3) var<storage, read_write> omega: array<vec4<real>>;
/// (m, J, 1/m, 1/J); the inverses are 0 for fixed particles.
@group(1) @binding(4) var<storage, read_write> inertial: array<vec4<real>>;
/// Bit 0: 1 for a fixed (not integrated) particle; bits 1..: the particle's replica.
@group(1) @binding(5) var<storage, read_write> fixed: array<u32>;
/// Total force at the current step (xyz).
@group(1) @binding(6) var<storage, read_write> force: array<vec4<real>>;
/// Total spatial moment at the current step (xyz).
@group(1) @binding(7) var<storage, read_write> moment: array<vec4<real>>;
/// Potential energies owned by the particle: (contact pairs with j > i, walls, gravity + pendulum, 0).
@group(1) @binding(8) var<storage, read_write> pot: array<vec4<real>>;
/// Reference attitude of each particle's bonds (x, y, z, w): its attitude at t = 0, shared by
/// all its bonds (`Model::reference_attitudes`), unless its replica has FLAG_BOND_Q0.
@group(1) @binding(9) var<storage, read_write> q_ref: array<vec4<real>>;
/// Reference position of each particle, where its replica's bonds were made (`Model::
/// reference_positions`), stored as `pos` and `cell` are: offset (xyz) and, with BLOCKS, block
/// (xyz). A bond's d0, L0 and d̂0 are formed from them, unless its replica has FLAG_BOND_REF.
@group(1) @binding(10) var<storage, read_write> ref_pos: array<vec4<real>>;
@group(1) @binding(11) var<storage, read_write> ref_cell: array<vec4<i32>>;
/// Dissipative loads of the last force evaluation (MODEL §10; only where some replica has
/// FLAG_DISSIPATE, placeholders otherwise), one vec4 per particle in each of three arrays, so
/// that each is as large as the other per-particle arrays: force (xyz) with the particle's share
/// of E_dissipated (w), moment (xyz) with the running compensation of that sum (w,
/// `ledger_step`), and the walls' part of the force (xyz). Written by `dissipate`, added by the
/// particle kernel, booked by the kicks. Kernels reach them through the generated accessors
/// `dload_*_at` / `dload_*_put` (src/gpu/shader.rs, `DLOAD_ARRAYS`): with the per-particle
/// arrays in two parts nothing dissipates, and the accessors there bind none of them.
@group(1) @binding(23) var<storage, read_write> dload_force: array<vec4<real>>;
@group(1) @binding(24) var<storage, read_write> dload_moment: array<vec4<real>>;
@group(1) @binding(25) var<storage, read_write> dload_wall: array<vec4<real>>;

/// The tangential history of the frictional contacts (MODEL §10; where some replica has
/// friction, placeholders otherwise). Row i: particle i's contacts with every partner it
/// touches, `hist_count` of them, partner indices ascending in `hist_key` and ξ (xyz, seen from
/// i) in `hist_xi`, HIST_SLOTS each; each pair is kept by both its particles, the two copies exact
/// negatives (`dissipate` evaluates a pair as its lower index sees it at both ends). Only
/// `dissipate` of particle i reads or writes row i: the evaluation reads the row and rewrites it
/// in place, so the row holds the output of the last evaluation, the input of the next. A
/// contact that would need more slots fails the replica (`RSTATUS_HIST_*`). Walls: ξ of
/// particle i at the replica's wall w in `whist`, row i·W + w, W = reps[r].wall_slots.
@group(2) @binding(34) var<storage, read_write> hist_count: array<u32>;
@group(2) @binding(35) var<storage, read_write> hist_key: array<u32>;
@group(2) @binding(36) var<storage, read_write> hist_xi: array<vec4<real>>;
@group(2) @binding(37) var<storage, read_write> whist: array<vec4<real>>;

/// Particle i's row of the contact history in this chunk's window of it.
fn hist_row(i: u32) -> u32 {
    return i - chunk.hist_win;
}

/// Whether replica r's model dissipates (dashpots in `dload_*`).
fn dissipates(r: u32) -> bool {
    return (reps[r].flags & FLAG_DISSIPATE) != 0u;
}

/// One step of the compensated (Kahan) sum of a particle's share of E_dissipated: `s` is
/// (sum, compensation), as the lanes w of `dload_force` and `dload_moment` hold it. A share
/// grows by one small term per kick over a whole run, which a plain f32 sum would lose; the
/// share is sum − compensation (`dissipated_at`).
fn ledger_step(s: vec2<real>, x: real) -> vec2<real> {
    let y = x - s.y;
    let t = s.x + y;
    return vec2<real>(t, (t - s.x) - y);
}

/// Particle i's share of E_dissipated (0 where its replica does not dissipate), after every kick
/// the last particle kernel made: at a step that closes a batch (recorded), the step's own.
fn dissipated_at(r: u32, i: u32) -> real {
    if !dissipates(r) {
        return 0.0;
    }
    return dload_force_at(i).w - dload_moment_at(i).w;
}

/// Particle i's share of E_dissipated at the step the particle kernel just evaluated, before the
/// next step's opening kick that it makes inside a batch: the ledger the watch checks with that
/// step's energies (the particle kernel leaves it in the free lane `dload_wall.w`). The share
/// after both kicks would be ahead by the opening kick's work, about ½ h D·v (twin:
/// `KinSums::e_dissipated`, src/engine/cpu/integrate.rs).
fn dissipated_node_at(r: u32, i: u32) -> real {
    if !dissipates(r) {
        return 0.0;
    }
    return dload_wall_at(i).w;
}

/// Twin of `kick_work` (src/engine/cpu/integrate.rs): the work of dissipative loads (f, m) in a
/// kick by `c` that took (v, Ω) from (v0, w0) to (v1, w1): a kick changes ½ m v² by exactly
/// (c/2) f·(v0 + v1), and ½ J Ω² likewise. The ledger books its negative.
fn kick_work(c: real, f: vec3<real>, m: vec3<real>, v0: vec3<real>, v1: vec3<real>, w0: vec3<real>, w1: vec3<real>) -> real {
    return 0.5 * c * (dot3(f, v0 + v1) + dot3(m, w0 + w1));
}

/// Bond end indices (i, j).
@group(2) @binding(0) var<storage, read_write> bond_ends: array<vec2<u32>>;
/// Reference direction d̂0 (xyz) and rest length L0 (w), for replicas with FLAG_BOND_REF (a
/// placeholder when no replica has it).
@group(2) @binding(1) var<storage, read_write> bond_ref: array<vec4<real>>;
/// Reference attitudes per bond, for replicas with FLAG_BOND_Q0 (bonds that disagree on a
/// particle's): q_i0 at 2k, q_j0 at 2k + 1. A placeholder when no replica has it.
@group(2) @binding(2) var<storage, read_write> bond_q0: array<vec4<real>>;

/// Per-bond results, mirrors `BondOut` (src/interactions/mod.rs).
struct BondOutGpu {
    /// Force on i (xyz), bending energy (w).
    f_i: vec4<real>,
    /// Moment on i (xyz), axial energy (w).
    m_i: vec4<real>,
    /// Moment on j (xyz), shear energy (w).
    m_j: vec4<real>,
}
@group(2) @binding(3) var<storage, read_write> bond_out: array<BondOutGpu>;

/// The axial-energy lane of a bond that broke at this evaluation (no axial energy is negative):
/// its loads are zero, its bending lane holds the energy it released (`U^m + U^a + U^s` at this
/// state), so that the particle kernel can hand that energy to the watch (shaders/watch.wgsl).
const BROKE_NOW: real = -1.0;

/// Whether bond result `o` is that of a bond broken at this evaluation.
fn broke_now(o: BondOutGpu) -> bool {
    return o.m_i.w < 0.0;
}
/// Particle → bond incidence (CSR, `Model::incidence`): entries are 2·bond + end.
@group(2) @binding(4) var<storage, read_write> inc_offsets: array<u32>;
@group(2) @binding(5) var<storage, read_write> inc_entries: array<u32>;
/// Beside each incidence entry, the batch index of its bond's other end (where some replica has
/// binder damping; a placeholder otherwise): `dissipate` evaluates a bond's dashpots from its
/// ends without reading the bond, which may lie outside its particle chunk's bond window.
@group(2) @binding(38) var<storage, read_write> inc_peer: array<u32>;
/// Beside each particle's incidence range, its bonded partners (batch indices) sorted by index,
/// `NO_PARTNER` after them for a repeated pair (where some replica's lists leave bonded pairs
/// out, FLAG_UNLISTED; a placeholder otherwise): what `nbr_build` and the grid walks leave out
/// and the particle kernel takes the contact energies of (`grid::BondedPartners` on the CPU).
@group(2) @binding(39) var<storage, read_write> bonded: array<u32>;
/// Beside each incidence entry, the tangential history ξ (xyz) of its bond's pair seen from the
/// bond's end i (MODEL §10; the CPU keeps one per bond), where some replica has friction between
/// spheres and its lists leave bonded pairs out (a placeholder otherwise): both ends of a bond
/// evaluate its slider alike from the bond's own ends and each rewrites its own copy in place,
/// so the two copies stay equal with no race. Saved, with the rows', by lower index
/// (src/gpu/engine/bond_history.rs).
@group(2) @binding(40) var<storage, read_write> inc_xi: array<vec4<real>>;

/// `bonded`'s filler, after a particle's partners.
const NO_PARTNER: u32 = 0xffffffffu;

/// Whether replica r's lists leave its bonded pairs out.
fn unlisted(r: u32) -> bool {
    return (reps[r].flags & FLAG_UNLISTED) != 0u;
}

/// Whether replica r's bonded pairs' contacts go with their bonds (the CPU engine's
/// `bond_contacts`): wherever its lists leave them out (FLAG_UNLISTED). The bond kernel then
/// evaluates their Hertz contacts, `dissipate` their dashpots and sliders in its incidence loop
/// (their history in `inc_xi`) but where it walks them (`walks_bonded`), and the walks leave
/// them out.
fn bond_contacts(r: u32) -> bool {
    return unlisted(r);
}

/// Whether `dissipate` visits replica r's bonded partners in its walk (merged into its list in
/// index order, or not skipped in the grid walk) for their dashpots and sliders, their history
/// in the rows (`hist_*`, by partner index): where its spheres have friction but the batch's
/// incidence with `inc_xi` would need more than one buffer (FLAG_BOND_HISTORY off: pages of
/// the incidence overlap, and a copy in an overlap is not the one the host reads).
fn walks_bonded(r: u32) -> bool {
    return bond_contacts(r) && reps[r].damping.z > 0.0 && (reps[r].flags & FLAG_BOND_HISTORY) == 0u;
}

/// The `k`-th entry of the list that starts at slot `base` and holds `count`, `NO_PARTNER`
/// past the last.
fn listed_at(base: u32, count: u32, k: u32) -> u32 {
    if k >= count {
        return NO_PARTNER;
    }
    return nbr[base - chunk.nbr_win + k];
}

/// Particle i's `k`-th bonded partner (k from `inc_offsets[i]`), `NO_PARTNER` past the last.
fn bonded_at(i: u32, k: u32) -> u32 {
    if k >= inc_offsets[i + 1u] {
        return NO_PARTNER;
    }
    return bonded[k - chunk.inc_win];
}

/// Whether particle j is among particle i's bonded partners (a binary search of its sorted run).
fn is_bonded(i: u32, j: u32) -> bool {
    var lo = inc_offsets[i];
    var hi = inc_offsets[i + 1u];
    while lo < hi {
        let mid = (lo + hi) / 2u;
        let b = bonded[mid - chunk.inc_win];
        if b == j {
            return true;
        }
        if b < j {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    return false;
}
/// With BLOCKS, the block of each particle's position (xyz): the cell of its replica's grid that
/// holds it. State (saved, backed up); `integrate` moves a particle into its new block in the
/// step that takes it out, so the grid uses it as the cell as it is. Without (f64), the cell
/// the grid found at the last rebuild.
@group(2) @binding(6) var<storage, read_write> cell: array<vec4<i32>>;
@group(2) @binding(7) var<storage, read_write> hash: array<u32>;
/// Arrival slot of each particle in its bucket (atomic order, replaced by index order later).
@group(2) @binding(8) var<storage, read_write> slot: array<u32>;
/// Bucket b holds sorted[bucket_start[b]..bucket_start[b + 1]] (table size + 1 entries).
@group(2) @binding(9) var<storage, read_write> bucket_start: array<u32>;
@group(2) @binding(10) var<storage, read_write> sorted_tmp: array<u32>;
/// Bucket-ordered copies for the neighbour loop: cell (xyz) and particle index (w), and
/// position + radius, so that the loop reads consecutive memory.
@group(2) @binding(11) var<storage, read_write> sorted_cell: array<vec4<i32>>;
@group(2) @binding(14) var<storage, read_write> sorted_pos: array<vec4<real>>;
/// STATUS_* slots (defined by the generated header): step counter, neighbour-list rebuild and
/// overflow flags, break count; then RSTATUS_LEN words per replica r from STATUS_LEN + r·RSTATUS_LEN,
/// its first failures (RSTATUS_* slots). Integer atomics only.
@group(2) @binding(12) var<storage, read_write> status: array<atomic<u32>>;
/// Step counter for the next step, copied into status[STATUS_STEP] between steps.
@group(2) @binding(13) var<storage, read_write> step_next: array<u32>;
/// Verlet neighbour lists: particle i's candidates (all j within r_i + r_j + skin at the last
/// rebuild, sorted by particle index as on the CPU) are nbr[nbr_offsets[i] ..][..nbr_count[i]]
/// while nbr_count[i] ≤ its capacity nbr_offsets[i + 1] − nbr_offsets[i] (planned per particle
/// by the host from the counts, src/gpu/engine.rs); a longer list falls back to the grid. Sorted, the
/// contact sum runs in an order that depends on the current partners only, not on when the
/// list was last rebuilt, so a reloaded or rolled-back state continues bit for bit.
@group(2) @binding(15) var<storage, read_write> nbr: array<u32>;
@group(2) @binding(16) var<storage, read_write> nbr_count: array<u32>;
/// Start of each particle's list in `nbr` (n + 1 entries, the last the total capacity).
@group(2) @binding(22) var<storage, read_write> nbr_offsets: array<u32>;
/// Positions at the last rebuild (xyz).
@group(2) @binding(17) var<storage, read_write> x_ref: array<vec4<real>>;
/// Per replica: the displacement its anchor (first particle) will have since the last rebuild
/// after this step's drift (`drift_anchor`); the skin rule measures every particle's
/// displacement relative to it, so a body in flight does not rebuild for its flight.
@group(2) @binding(33) var<storage, read_write> drift: array<vec4<real>>;
/// Rupture (bound only with FLAG_RUPTURE; placeholders otherwise). Per bond: the scale s_b of
/// its thresholds (only with FLAG_WEIBULL; otherwise 1 and a placeholder), and a bit set once
/// it is broken: bond k of replica r is bit (k − b_start) mod 32 of word broken_word +
/// (k − b_start) / 32 (`broken_bit`). Set only by the bond's own thread (atomicOr: its word is
/// shared with 31 others), read by it at later steps; saved with the state (as one u32 per bond)
/// and backed up for rollback. Bound whole: 1 bit per bond fits any binding.
@group(2) @binding(18) var<storage, read_write> bond_scale: array<real>;
@group(2) @binding(19) var<storage, read_write> bond_broken: array<atomic<u32>>;

/// Word and bit of batch bond k of replica r in `bond_broken`.
fn broken_bit(r: u32, k: u32) -> vec2<u32> {
    let local = k - reps[r].b_start;
    return vec2<u32>(reps[r].broken_word + (local >> 5u), 1u << (local & 31u));
}
/// Break records of the current batch, entry e < status[STATUS_BREAKS] (at most one per bond,
/// and at most `MAX_BREAK_RECORDS`: the host takes a batch that broke more again in shorter
/// ones; a slot beyond the array is not written): midpoint of the two particles (xyz, relative to the
/// position origin) and released energy U^m + U^a + U^s (w); bond index, step within the batch
/// (status[STATUS_STEP]) and channel (x, y, z; w unused).
@group(2) @binding(20) var<storage, read_write> break_at: array<vec4<real>>;
@group(2) @binding(21) var<storage, read_write> break_id: array<vec4<u32>>;

/// Vector from block b to the position (b_x, o) at the block edge `edge`: (b_x − b)·edge + o.
/// Integer block differences are exact and the scaling of small ones too, so the vector between
/// neighbours is resolved to ~1e-7 of the edge, however far both lie from the origin.
fn block_vector(b_x: vec3<i32>, o: vec3<real>, b: vec3<i32>, edge: real) -> vec3<real> {
    if BLOCKS {
        return vec3<real>(b_x - b) * edge + o;
    }
    return o;
}

/// x_i − x_j for particles of one replica (block edge `edge`).
fn pair_vector(i: u32, j: u32, edge: real) -> vec3<real> {
    return block_vector(cell_at(i).xyz, pos_at(i).xyz - pos_at(j).xyz, cell_at(j).xyz, edge);
}

/// Position of particle i from its replica's origin (for the fields and the diagnostics, which
/// depend on the origin as the model's do; the host adds the origin's terms).
fn position_from_origin(i: u32, edge: real) -> vec3<real> {
    return block_vector(cell_at(i).xyz, pos_at(i).xyz, vec3<i32>(0), edge);
}

/// Mirrors `ChunkGpu` in src/gpu/chunks.rs: the part of the batch one dispatch of a chunked
/// kernel covers, and where the windows of the arrays bound in parts start (the per-bond
/// arrays, the incidence entries and the neighbour lists may exceed one binding): element x of
/// such an array is element x − *_win of its binding.
struct ChunkGpu {
    /// Particles p_first .. p_end (particle kernel, nbr_build).
    p_first: u32,
    p_end: u32,
    /// Bonds b_first .. b_end (bond kernel).
    b_first: u32,
    b_end: u32,
    bond_win: u32,
    inc_win: u32,
    nbr_win: u32,
    /// First level-0 workgroup of reduce_state.
    group_base: u32,
    /// Entries fill_first .. fill_end of halo_fill (bond chunks).
    fill_first: u32,
    fill_end: u32,
    /// First particle of the part of the per-particle arrays the chunk's particles lie in: the
    /// particle kernel's own particle's values are element i − part_win (`PARTICLE_OWN` in
    /// src/gpu/shader.rs).
    part_win: u32,
    /// First particle of the contact history's window (`hist_row`).
    hist_win: u32,
}
/// The halo (src/gpu/chunks.rs): copies of the results of bonds below a particle chunk's window
/// of bond_out; particle i's far bonds, in its incidence order, are halo[halo_off[i] ..]. Entry
/// s copies bond halo_src[s]; halo_fill lists the entries in bond order, for `halo_fill`.
@group(2) @binding(25) var<storage, read_write> halo: array<BondOutGpu>;
@group(2) @binding(26) var<storage, read_write> halo_off: array<u32>;
@group(2) @binding(27) var<storage, read_write> halo_src: array<u32>;
@group(2) @binding(28) var<storage, read_write> halo_fill: array<u32>;
@group(3) @binding(4) var<uniform> chunk: ChunkGpu;

fn current_step() -> u32 {
    return atomicLoad(&status[STATUS_STEP]);
}

/// Replica of particle i (bits 1.. of `fixed`).
fn replica_of(i: u32) -> u32 {
    return fixed[i] >> 1u;
}

/// Whether particle i is fixed (bit 0 of `fixed`).
fn is_fixed(i: u32) -> bool {
    return (fixed[i] & 1u) != 0u;
}

/// Index of replica r's status slot `slot` (RSTATUS_*) in `status`.
fn rslot(r: u32, slot: u32) -> u32 {
    return STATUS_LEN + r * RSTATUS_LEN + slot;
}

fn rstatus(r: u32, slot: u32) -> u32 {
    return atomicLoad(&status[rslot(r, slot)]);
}

/// The host froze replica r (a failure found by an earlier `advance`, or the driver's `freeze`).
fn held(r: u32) -> bool {
    return (reps[r].flags & FLAG_HELD) != 0u;
}

/// A failure of replica r at an earlier step than `step` (the energy guard's, from `watch_update`,
/// counts too). Every kernel that reports failures
/// stops on it, but not on a report of its own kind at the current step (which may come from
/// another workgroup of the running dispatch): so all reports of a kind come from one step, the
/// first failing one, and the lowest particle of that step wins the `atomicMin`, whatever the
/// workgroup schedule. Replicas fail independently: the others go on.
fn failed_before(r: u32, step: u32) -> bool {
    let first = min(min(rstatus(r, RSTATUS_EXACT_STEP), rstatus(r, RSTATUS_BAD_STEP)), rstatus(r, RSTATUS_GRID_STEP));
    return min(min(first, rstatus(r, RSTATUS_GUARD_STEP)), rstatus(r, RSTATUS_HIST_STEP)) < step;
}

/// Nothing of replica r may change any more: the host froze it, an earlier step failed, or this
/// step's rrp-exact check or grid rebuild did (both finished dispatches before the kernels that
/// ask). A non-finite report of this same step's particle kernel does not count: it may come
/// from another workgroup of the running dispatch, and stopping on it would make both the
/// report and the final state depend on the schedule; the state freezes from the next step on.
fn frozen(r: u32, step: u32) -> bool {
    return held(r) || rstatus(r, RSTATUS_EXACT_STEP) != STATUS_NONE || rstatus(r, RSTATUS_GRID_STEP) != STATUS_NONE
        || rstatus(r, RSTATUS_BAD_STEP) < step || rstatus(r, RSTATUS_GUARD_STEP) < step
        || rstatus(r, RSTATUS_HIST_STEP) < step || missed(step);
}

/// Whether batch step `step` is a grid step of the batch: its absolute number is a multiple of
/// GRID_PERIOD (twin of `GridSteps::grid_step`, src/gpu/params.rs).
fn grid_phase_step(step: u32) -> bool {
    return (step + params.grid_phase) % GRID_PERIOD == 0u;
}

/// Whether batch step `step` is a grid step of replica r (its own steps: the same as the
/// batch's wherever the batch leaves the grid stage out, since its replicas are then in step).
fn replica_grid_step(r: u32, step: u32) -> bool {
    return (step + reps[r].grid_phase) % GRID_PERIOD == 0u;
}

/// Whether the host recorded the grid stage in batch step `step` (twin of
/// `GridSteps::recorded`): in every step, or only in the first and the grid steps.
fn grid_recorded(step: u32) -> bool {
    return params.grid_fast == 0u || step == 0u || grid_phase_step(step);
}

/// A step of this batch up to `step` had to rebuild where the host recorded no grid stage
/// (`rebuild_decide` sets STATUS_MISS_STEP). From the rest of that step on, every kernel
/// leaves the whole batch as it is (`frozen`, and the kernels that run before it in a step),
/// so that the host can finish the batch from that step with the grid stage recorded: the
/// same steps, the same bits.
fn missed(step: u32) -> bool {
    return atomicLoad(&status[STATUS_MISS_STEP]) <= step;
}

/// The total force of replica r's walls on particle i, recomputed from the state with `wall` as
/// the particle kernel computes it: read by the records (`reduce_state`) and the watch
/// (`watch_state`), so that the particle kernel stores no per-particle wall force.
fn wall_force_at(r: u32, i: u32) -> vec3<real> {
    var f = vec3<real>(0.0);
    let edge = reps[r].cell_edge;
    let xi = pos_at(i);
    let ci = cell_at(i).xyz;
    let w0 = reps[r].wall_start;
    for (var k = w0; k < w0 + reps[r].n_walls; k++) {
        let xw = block_vector(ci, xi.xyz, walls[k].block.xyz, edge);
        f = f + wall(xw, xi.w, walls[k].point.xyz, walls[k].normal.xyz, reps[r].k_wall).force;
    }
    if dissipates(r) {
        // The walls' dashpots, after the elastic forces as on the CPU.
        f = f + dload_wall_at(i).xyz;
    }
    return f;
}

/// Normal of the wall replica r first touched (`watch_update` names it), or zero before.
fn contact_normal(r: u32) -> vec3<real> {
    let w = rstatus(r, RSTATUS_CONTACT_WALL);
    if w == STATUS_NONE {
        return vec3<real>(0.0);
    }
    return walls[w].normal.xyz;
}

/// True in a step in which some replica rebuilds its grid part and neighbour lists
/// (`rebuild_decide`; the forces do not depend on when the lists were rebuilt).
fn rebuilding() -> bool {
    return (atomicLoad(&status[STATUS_REBUILD]) & REBUILD_SOME) != 0u;
}

/// Records a non-finite particle i of replica r found by the force evaluation of `step`. Only
/// made at the replica's first failing step (`failed_before` stops its kernels afterwards), so
/// the two minima together give the lowest particle of that step.
fn report_bad(r: u32, step: u32, i: u32) {
    atomicMin(&status[rslot(r, RSTATUS_BAD_STEP)], step);
    atomicMin(&status[rslot(r, RSTATUS_BAD_PARTICLE)], i);
}

/// Records a particle the grid cannot place at `step` (as `report_bad`).
fn report_grid(r: u32, step: u32, i: u32) {
    atomicMin(&status[rslot(r, RSTATUS_GRID_STEP)], step);
    atomicMin(&status[rslot(r, RSTATUS_GRID_PARTICLE)], i);
}

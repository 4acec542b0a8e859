//! WGSL composition and reflection: a generated header (real type, workgroup sizes, constants
//! shared with Rust) followed by the shared library files and one kernel file, validated with
//! naga (no adapter needed) and reflected to learn which bindings each entry point uses.

pub use super::error::ShaderError;
pub use super::params::{EARLY_FRACTION, EARLY_INTERVAL, GRID_PERIOD};
use super::params::{
    FLAG_BOND_HISTORY, FLAG_BOND_Q0, FLAG_BOND_REF, FLAG_DISSIPATE, FLAG_EARLY, FLAG_GRAVITY, FLAG_HELD, FLAG_PENDULUM,
    FLAG_RUPTURE, FLAG_UNLISTED, FLAG_WEIBULL,
};
use crate::engine::Precision;
use crate::grid::{CELL_HASH_PRIMES, MAX_CELL_COORD};
use std::collections::BTreeMap;

/// Invocations per workgroup of the per-particle, per-bond and reduction kernels.
pub const WG: u32 = 64;
/// Invocations per workgroup of the prefix scan (each scans two values).
pub const SCAN_WG: u32 = 256;
/// Slots of a diagnostics record (`shaders/reduce.wgsl`), given to WGSL by the header: the
/// energy terms (one real each), then P, S, L, the total wall force and Σ m x (three each), then
/// E_dissipated.
pub const REC_E_TRANS: usize = 0;
pub const REC_E_ROT: usize = 1;
pub const REC_U_BEND: usize = 2;
pub const REC_U_AXIAL: usize = 3;
pub const REC_U_SHEAR: usize = 4;
pub const REC_U_CONTACT: usize = 5;
pub const REC_U_WALL: usize = 6;
pub const REC_U_GRAVITY: usize = 7;
pub const REC_P: usize = 8;
pub const REC_S: usize = 11;
pub const REC_L: usize = 14;
pub const REC_F_WALL: usize = 17;
/// Σ m x with x relative to the position origin (the host adds `M·origin`).
pub const REC_MASS_X: usize = 20;
/// E_dissipated (MODEL §10): the particles' shares (`dissipated_at`, shaders/bindings.wgsl).
pub const REC_E_DISS: usize = 23;
/// Reals per diagnostics record.
pub const NQ: usize = 24;
/// Slots of a watch record (`shaders/watch.wgsl`), given to WGSL by the header: the mechanical
/// energy (kinetic + elastic: the guard's scale), gravity's energy, the energy released at this
/// step, Σ m v·n along the first contacted wall, the total wall force (three) and E_dissipated.
pub const W_MECH: usize = 0;
pub const W_GRAV: usize = 1;
pub const W_REL: usize = 2;
pub const W_PN: usize = 3;
pub const W_F: usize = 4;
/// E_dissipated so far (MODEL §10), the particles' shares.
pub const W_DISS: usize = 7;
/// Reals per watch record.
pub const NW: usize = 8;
/// Particles each lane of the watch's first level adds up in order before the workgroup's tree
/// sum (`watch_state`): a tree sum per WG particles cost more than the particle kernel on
/// lavapipe (its barriers), one per WG·WATCH_PER_LANE costs little anywhere.
pub const WATCH_PER_LANE: u32 = 16;
/// Bits of a replica's watch flags (`watch_flags`): watched at all; touched a wall; touching
/// one at the last observed step; separated after its last contact.
pub const WATCH_ON: u32 = 1;
pub const WATCH_CONTACTED: u32 = 2;
pub const WATCH_IN_CONTACT: u32 = 4;
pub const WATCH_SEPARATED: u32 = 8;

/// Slots of the u32 status buffer (`status` in shaders/bindings.wgsl), given to WGSL by the
/// header: first the batch-wide words, then `RSTATUS_LEN` words per replica.
pub const STATUS_STEP: usize = 0;
/// The step's rebuild decision: `REBUILD_ALL` when every replica must rebuild (set by the host
/// for a batch's first step, and by an overflowed list), `REBUILD_SOME` once `rebuild_decide`
/// found a replica that rebuilds in this step (the grid stage then launches). Each replica's own
/// verdicts are in its `RSTATUS_REBUILD` slot.
pub const STATUS_REBUILD: usize = 1;
/// Some particle moved more than half a skin since the last rebuild.
pub const REBUILD_ABS: u32 = 1;
/// Some particle moved more than half a skin relative to its replica's anchor.
pub const REBUILD_REL: u32 = 2;
pub const REBUILD_ALL: u32 = REBUILD_ABS | REBUILD_REL;
/// This step rebuilds: in `STATUS_REBUILD`, some replica's grid and lists; in a replica's
/// `RSTATUS_REBUILD`, its own.
pub const REBUILD_SOME: u32 = 4;
/// In a replica's `RSTATUS_REBUILD`, at a grid step (`GRID_PERIOD`) of a replica with
/// `FLAG_EARLY`: some particle moved more than `EARLY_FRACTION` of half a skin since the last
/// rebuild, absolutely and relative to the anchor (the two tests of `REBUILD_ABS`/`REBUILD_REL`
/// with the smaller threshold `ReplicaGpu::early_skin_sq`).
pub const REBUILD_EARLY_ABS: u32 = 8;
pub const REBUILD_EARLY_REL: u32 = 16;
pub const REBUILD_EARLY: u32 = REBUILD_EARLY_ABS | REBUILD_EARLY_REL;
/// Non-zero once a neighbour list overflowed its capacity in this batch (sticky).
pub const STATUS_OVERFLOW: usize = 2;
/// Largest neighbour count seen by an overflowing rebuild.
pub const STATUS_MAX_NBR: usize = 3;
/// Bonds broken so far in this batch: the next free entry of the break records (`break_at`,
/// `break_id` in shaders/bindings.wgsl). An integer `atomicAdd` picks a bond's entry, so the
/// entries' order depends on the schedule; their content does not, and the host sorts them.
pub const STATUS_BREAKS: usize = 4;
/// Steps of this batch that rebuilt the grid and the neighbour lists (counted by
/// `grid_args_set`; `GpuEngine::neighbour_rebuilds`).
pub const STATUS_REBUILDS: usize = 5;
/// The first step of this batch that rebuilds where the host recorded no grid stage (a batch
/// recorded with `SimParams::grid_fast`), STATUS_NONE while there is none: every kernel stops
/// from there on (`missed` in shaders/bindings.wgsl), and the host finishes the batch from
/// that step with the grid stage recorded in every step.
pub const STATUS_MISS_STEP: usize = 6;
/// Batch-wide words; replica r's words start at `STATUS_LEN + r·RSTATUS_LEN`.
pub const STATUS_LEN: usize = 7;
/// Per-replica slots: first step whose rrp-exact condition failed, and the lowest failing
/// particle (batch index) of that step.
pub const RSTATUS_EXACT_STEP: usize = 0;
pub const RSTATUS_EXACT_PARTICLE: usize = 1;
/// First step whose force evaluation found a non-finite particle (x, v, q, Ω, F or M), and the
/// lowest such particle of that step.
pub const RSTATUS_BAD_STEP: usize = 2;
pub const RSTATUS_BAD_PARTICLE: usize = 3;
/// First step whose grid rebuild could not place a particle (non-finite or out-of-range
/// position), and the lowest such particle. Kept apart from RSTATUS_BAD_*: as on the CPU, a
/// position the grid refuses is reported before any force of that step is looked at.
pub const RSTATUS_GRID_STEP: usize = 4;
pub const RSTATUS_GRID_PARTICLE: usize = 5;
/// The step whose energy the guard refused (`watch_update`, shaders/watch.wgsl).
pub const RSTATUS_GUARD_STEP: usize = 6;
/// The batch index of the wall the replica touched first (STATUS_NONE before): the particle
/// kernel reads its normal for the watch's m v·n. Set by the host at the start of a batch.
pub const RSTATUS_CONTACT_WALL: usize = 7;
/// First step at which a sphere had more frictional contacts than its contact history holds
/// (`HIST_SLOTS`), and the lowest such particle (MODEL §10 on the GPU).
pub const RSTATUS_HIST_STEP: usize = 8;
pub const RSTATUS_HIST_PARTICLE: usize = 9;
/// The skin rule's verdicts for the replica in this step (`REBUILD_ABS | REBUILD_REL` bits,
/// or-ed by `integrate`, cleared by `drift_anchor`), and `REBUILD_SOME` once `rebuild_decide`
/// has decided that the replica rebuilds (both verdicts, or `REBUILD_ALL` batch-wide): a
/// replica's rebuild never depends on another's motion. Starts at 0.
pub const RSTATUS_REBUILD: usize = 10;
/// Steps of this batch in which the replica rebuilt its grid part and lists (starts at 0;
/// `GpuEngine::replica_rebuilds`).
pub const RSTATUS_REBUILDS: usize = 11;
/// Status words per replica.
pub const RSTATUS_LEN: usize = 12;
/// Contacts whose tangential history (MODEL §10 friction) one sphere keeps on the GPU
/// (`hist_key`, `hist_xi` in shaders/bindings.wgsl; each pair at both its spheres): 12 at most
/// in an FCC packing of equal spheres; more is a failure of the replica with a message (the
/// CPU engine has no such bound).
pub const HIST_SLOTS: usize = 16;
/// Odd multiplier mixing the replica into the cell hash (`cell_hash_replica`).
pub const REPLICA_HASH_PRIME: u32 = 2_654_435_761;
/// Value of an unset failure slot.
pub const STATUS_NONE: u32 = u32::MAX;

/// Library files composed, in this order, before every kernel file. The atan2 and finiteness
/// files depend on the precision (f64 has no atan2 builtin, see `shaders/atan2_f64.wgsl`, and no
/// same-width bitcast to u32, see `shaders/finite_f64.wgsl`).
const COMMON: &str = include_str!("../../shaders/common.wgsl");
const ATAN2_F32: &str = include_str!("../../shaders/atan2_f32.wgsl");
const ATAN2_F64: &str = include_str!("../../shaders/atan2_f64.wgsl");
const FINITE_F32: &str = include_str!("../../shaders/finite_f32.wgsl");
const FINITE_F64: &str = include_str!("../../shaders/finite_f64.wgsl");
const INTERACTIONS: &str = include_str!("../../shaders/interactions.wgsl");
const GRID: &str = include_str!("../../shaders/grid.wgsl");
const BINDINGS: &str = include_str!("../../shaders/bindings.wgsl");
/// Tree sums over a workgroup (composed by the files that reduce: they set its `RQ`).
const TREE: &str = include_str!("../../shaders/tree.wgsl");
/// A particle's contact partners in index order: its list merged with its bonded partners, or
/// the grid walk of an overflowed list (composed by the kernels that visit contacts).
const WALK: &str = include_str!("../../shaders/walk.wgsl");

/// A kernel file of `shaders/` and its entry points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelFile {
    pub name: &'static str,
    pub source: &'static str,
    pub entry_points: &'static [&'static str],
    /// Library files this one composes beyond the common ones (before it).
    pub libraries: &'static [&'static str],
}

/// Every kernel file; the engine builds a pipeline for each entry point.
pub const KERNEL_FILES: &[KernelFile] = &[
    KernelFile {
        name: "integrate",
        source: include_str!("../../shaders/integrate.wgsl"),
        entry_points: &["integrate_check", "drift_anchor", "integrate", "rebuild_decide"],
        libraries: &[],
    },
    KernelFile {
        name: "grid_build",
        source: include_str!("../../shaders/grid_build.wgsl"),
        entry_points: &["grid_args_set", "grid_clear", "grid_count", "grid_scatter", "grid_order", "nbr_build"],
        libraries: &[],
    },
    KernelFile {
        name: "scan",
        source: include_str!("../../shaders/scan.wgsl"),
        entry_points: &["scan_blocks", "scan_add"],
        libraries: &[],
    },
    KernelFile {
        name: "bonds",
        source: include_str!("../../shaders/bonds.wgsl"),
        entry_points: &["bonds", "halo_copy"],
        libraries: &[],
    },
    KernelFile {
        name: "particle",
        source: include_str!("../../shaders/particle.wgsl"),
        entry_points: &["particle"],
        libraries: &[WALK],
    },
    KernelFile {
        name: "dissipation",
        source: include_str!("../../shaders/dissipation.wgsl"),
        entry_points: &["dissipate"],
        libraries: &[WALK],
    },
    KernelFile {
        name: "reduce",
        source: include_str!("../../shaders/reduce.wgsl"),
        entry_points: &["reduce_state", "reduce_partials"],
        libraries: &[TREE],
    },
    KernelFile {
        name: "watch",
        source: include_str!("../../shaders/watch.wgsl"),
        entry_points: &["watch_state", "watch_partials", "watch_update"],
        libraries: &[TREE],
    },
    KernelFile {
        name: "probe",
        source: include_str!("../../shaders/probe.wgsl"),
        entry_points: &[
            "atan2_probe",
            "cell_hash_probe",
            "finite_probe",
            "rupture_probe",
            "arith_probe",
            "damping_probe",
        ],
        libraries: &[],
    },
];

/// The generated header: the one place where the real type and the sizes shared with Rust are
/// given to WGSL.
pub fn header(precision: Precision) -> String {
    let (real, max) = match precision {
        Precision::F32 => ("f32", format!("{:?}", f32::MAX as f64)),
        Precision::F64 => ("f64", format!("{:?}", f64::MAX)),
    };
    let slots = [
        ("REC_E_TRANS", REC_E_TRANS),
        ("REC_E_ROT", REC_E_ROT),
        ("REC_U_BEND", REC_U_BEND),
        ("REC_U_AXIAL", REC_U_AXIAL),
        ("REC_U_SHEAR", REC_U_SHEAR),
        ("REC_U_CONTACT", REC_U_CONTACT),
        ("REC_U_WALL", REC_U_WALL),
        ("REC_U_GRAVITY", REC_U_GRAVITY),
        ("REC_P", REC_P),
        ("REC_S", REC_S),
        ("REC_L", REC_L),
        ("REC_F_WALL", REC_F_WALL),
        ("REC_MASS_X", REC_MASS_X),
        ("REC_E_DISS", REC_E_DISS),
        ("W_MECH", W_MECH),
        ("W_GRAV", W_GRAV),
        ("W_REL", W_REL),
        ("W_PN", W_PN),
        ("W_F", W_F),
        ("W_DISS", W_DISS),
        ("WATCH_ON", WATCH_ON as usize),
        ("WATCH_CONTACTED", WATCH_CONTACTED as usize),
        ("WATCH_IN_CONTACT", WATCH_IN_CONTACT as usize),
        ("WATCH_SEPARATED", WATCH_SEPARATED as usize),
        ("STATUS_BREAKS", STATUS_BREAKS),
        ("STATUS_REBUILDS", STATUS_REBUILDS),
        ("REBUILD_ABS", REBUILD_ABS as usize),
        ("REBUILD_REL", REBUILD_REL as usize),
        ("REBUILD_ALL", REBUILD_ALL as usize),
        ("REBUILD_SOME", REBUILD_SOME as usize),
        ("REBUILD_EARLY_ABS", REBUILD_EARLY_ABS as usize),
        ("REBUILD_EARLY_REL", REBUILD_EARLY_REL as usize),
        ("REBUILD_EARLY", REBUILD_EARLY as usize),
        ("GRID_PERIOD", GRID_PERIOD as usize),
        ("STATUS_MISS_STEP", STATUS_MISS_STEP),
        ("RSTATUS_REBUILD", RSTATUS_REBUILD),
        ("RSTATUS_REBUILDS", RSTATUS_REBUILDS),
        ("FLAG_GRAVITY", FLAG_GRAVITY as usize),
        ("FLAG_PENDULUM", FLAG_PENDULUM as usize),
        ("FLAG_RUPTURE", FLAG_RUPTURE as usize),
        ("FLAG_HELD", FLAG_HELD as usize),
        ("FLAG_BOND_Q0", FLAG_BOND_Q0 as usize),
        ("FLAG_BOND_REF", FLAG_BOND_REF as usize),
        ("FLAG_WEIBULL", FLAG_WEIBULL as usize),
        ("FLAG_DISSIPATE", FLAG_DISSIPATE as usize),
        ("FLAG_UNLISTED", FLAG_UNLISTED as usize),
        ("FLAG_EARLY", FLAG_EARLY as usize),
        ("FLAG_BOND_HISTORY", FLAG_BOND_HISTORY as usize),
    ];
    let mut s = format!(
        "// Generated by src/gpu/shader.rs for precision {p}.\n\
         alias real = {real};\n\
         const WG: u32 = {WG}u;\n\
         const SCAN_WG: u32 = {SCAN_WG}u;\n\
         const NQ: u32 = {NQ}u;\n\
         const NW: u32 = {NW}u;\n\
         const WATCH_PER_LANE: u32 = {WATCH_PER_LANE}u;\n\
         const MAX_REAL = {max};\n\
         const MAX_CELL_COORD = {MAX_CELL_COORD:?};\n\
         const BLOCKS: bool = {blocks};\n\
         const CELL_HASH_PRIMES = vec3<u32>({h0}u, {h1}u, {h2}u);\n\
         const STATUS_STEP: u32 = {STATUS_STEP}u;\n\
         const STATUS_REBUILD: u32 = {STATUS_REBUILD}u;\n\
         const STATUS_OVERFLOW: u32 = {STATUS_OVERFLOW}u;\n\
         const STATUS_MAX_NBR: u32 = {STATUS_MAX_NBR}u;\n\
         const STATUS_LEN: u32 = {STATUS_LEN}u;\n\
         const RSTATUS_EXACT_STEP: u32 = {RSTATUS_EXACT_STEP}u;\n\
         const RSTATUS_EXACT_PARTICLE: u32 = {RSTATUS_EXACT_PARTICLE}u;\n\
         const RSTATUS_BAD_STEP: u32 = {RSTATUS_BAD_STEP}u;\n\
         const RSTATUS_BAD_PARTICLE: u32 = {RSTATUS_BAD_PARTICLE}u;\n\
         const RSTATUS_GRID_STEP: u32 = {RSTATUS_GRID_STEP}u;\n\
         const RSTATUS_GRID_PARTICLE: u32 = {RSTATUS_GRID_PARTICLE}u;\n\
         const RSTATUS_GUARD_STEP: u32 = {RSTATUS_GUARD_STEP}u;\n\
         const RSTATUS_CONTACT_WALL: u32 = {RSTATUS_CONTACT_WALL}u;\n\
         const RSTATUS_HIST_STEP: u32 = {RSTATUS_HIST_STEP}u;\n\
         const RSTATUS_HIST_PARTICLE: u32 = {RSTATUS_HIST_PARTICLE}u;\n\
         const HIST_SLOTS: u32 = {HIST_SLOTS}u;\n\
         const RSTATUS_LEN: u32 = {RSTATUS_LEN}u;\n\
         const REPLICA_HASH_PRIME: u32 = {REPLICA_HASH_PRIME}u;\n\
         const STATUS_NONE: u32 = {STATUS_NONE}u;\n\
         const RUPTURE_SLACK: real = {slack:?};\n\
         const RUPTURE_PI = {pi:?};\n",
        p = precision.as_str(),
        blocks = super::frame::uses_blocks(precision),
        h0 = CELL_HASH_PRIMES[0],
        h1 = CELL_HASH_PRIMES[1],
        h2 = CELL_HASH_PRIMES[2],
        slack = match precision {
            Precision::F32 => crate::interactions::rupture::BOUND_SLACK_F32,
            Precision::F64 => crate::interactions::rupture::BOUND_SLACK_F64,
        },
        pi = std::f64::consts::PI,
    );
    for (name, value) in slots {
        s.push_str(&format!("const {name}: u32 = {value}u;\n"));
    }
    s
}

/// How the per-particle arrays of `PARTED` are bound: whole (one binding each), or in two
/// parts when one binding cannot hold them (`SimParams::part_len` particles in the first, the
/// rest in the second, `<name>_hi`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parts {
    One,
    Two,
}

/// The per-particle arrays of 16 or 32 bytes per particle (vec4), which a large model needs in
/// two bindings (`Parts::Two`): name, WGSL element type, bind group and the binding of the
/// second part `<name>_hi` (declared by `accessors`). The other per-particle arrays hold 4 bytes
/// per particle, four times as many particles per binding, and stay whole. Kernels read and
/// write these arrays through `<name>_at(i)` and `<name>_put(i, v)` only, except the particle
/// kernel's own particle's values (shaders/particle.wgsl, `PARTICLE_OWN`), which its chunk binds
/// as one part.
pub const PARTED: [(&str, &str, u32, u32); 15] = [
    ("pos", "vec4<real>", 1, 12),
    ("vel", "vec4<real>", 1, 13),
    ("quat", "vec4<real>", 1, 14),
    ("omega", "vec4<real>", 1, 15),
    ("inertial", "vec4<real>", 1, 16),
    ("force", "vec4<real>", 1, 17),
    ("moment", "vec4<real>", 1, 18),
    ("pot", "vec4<real>", 1, 19),
    ("q_ref", "vec4<real>", 1, 20),
    ("ref_pos", "vec4<real>", 1, 21),
    ("ref_cell", "vec4<i32>", 1, 22),
    ("cell", "vec4<i32>", 2, 29),
    ("sorted_cell", "vec4<i32>", 2, 30),
    ("sorted_pos", "vec4<real>", 2, 31),
    ("x_ref", "vec4<real>", 2, 32),
];

/// Entry points compiled only for whole per-particle arrays (`Parts::One`): MODEL §10's
/// dissipation is refused where the arrays need two parts (`GpuError::DissipationTooLarge`), so
/// `dissipate`, the widest kernel there, is not built for them and its bindings do not count
/// towards `context::STORAGE_BUFFERS_NEEDED_PARTS`.
pub const WHOLE_ONLY: [&str; 1] = ["dissipate"];

/// The arrays of `PARTED` the particle kernel reads and writes at its own particle only, bound
/// per chunk as the part that holds the chunk (`ChunkGpu::part_win`): with all of them in two
/// bindings it would exceed the 32 storage bindings per stage some adapters (lavapipe) allow.
pub const PARTICLE_OWN: [&str; 7] = ["vel", "quat", "omega", "inertial", "force", "moment", "pot"];

/// The dissipative loads of MODEL §10 (shaders/bindings.wgsl), one vec4 per particle each, so
/// that none needs a larger binding than the per-particle arrays of `PARTED`: force with the
/// particle's share of E_dissipated, moment with that sum's compensation, the walls' force with
/// (lane w, written by the particle kernel) the share at the step just evaluated, for the watch.
/// Kernels reach them through `<name>_at(i)` / `<name>_put(i, v)` / `<name>_put_w(i, x)`
/// (`accessors`). They are never
/// in two parts: nothing dissipates where `PARTED` needs two (`GpuError::DissipationTooLarge`),
/// and there the accessors are constants that bind nothing, so that the particle kernel stays
/// within the storage bindings a stage may have.
pub const DLOAD_ARRAYS: [&str; 3] = ["dload_force", "dload_moment", "dload_wall"];

/// Bytes per element of a `PARTED` array.
pub fn parted_elem(name: &str, precision: Precision) -> Option<u64> {
    PARTED
        .iter()
        .find(|p| p.0 == name)
        .map(|p| if p.1 == "vec4<real>" { super::sizes::particle_elem(precision) } else { 16 })
}

/// Declarations of the second parts and the accessors of the `PARTED` arrays for `parts`, and
/// the accessors of `DLOAD_ARRAYS`.
pub fn accessors(parts: Parts) -> String {
    let mut s = String::from("// Generated by src/gpu/shader.rs: per-particle arrays bound in parts (`PARTED`).\n");
    for (name, ty, group, hi) in PARTED {
        s.push_str(&format!("@group({group}) @binding({hi}) var<storage, read_write> {name}_hi: array<{ty}>;\n"));
        match parts {
            Parts::One => s.push_str(&format!(
                "fn {name}_at(i: u32) -> {ty} {{ return {name}[i]; }}\n\
                 fn {name}_put(i: u32, v: {ty}) {{ {name}[i] = v; }}\n"
            )),
            Parts::Two => s.push_str(&format!(
                "fn {name}_at(i: u32) -> {ty} {{\n    \
                     if i >= params.part_len {{ return {name}_hi[i - params.part_len]; }}\n    \
                     return {name}[i];\n}}\n\
                 fn {name}_put(i: u32, v: {ty}) {{\n    \
                     if i >= params.part_len {{ {name}_hi[i - params.part_len] = v; }} else {{ {name}[i] = v; }}\n}}\n"
            )),
        }
    }
    for name in DLOAD_ARRAYS {
        s.push_str(&match parts {
            Parts::One => format!(
                "fn {name}_at(i: u32) -> vec4<real> {{ return {name}[i]; }}\n\
                 fn {name}_put(i: u32, v: vec4<real>) {{ {name}[i] = v; }}\n\
                 fn {name}_put_w(i: u32, x: real) {{ {name}[i].w = x; }}\n"
            ),
            Parts::Two => format!(
                "fn {name}_at(i: u32) -> vec4<real> {{ return vec4<real>(0.0); }}\n\
                 fn {name}_put(i: u32, v: vec4<real>) {{}}\n\
                 fn {name}_put_w(i: u32, x: real) {{}}\n"
            ),
        });
    }
    s
}

/// Full WGSL source of one kernel file for a precision and binding of the per-particle arrays.
pub fn compose_parts(file: &KernelFile, precision: Precision, parts: Parts) -> String {
    let (atan2, finite) = match precision {
        Precision::F32 => (ATAN2_F32, FINITE_F32),
        Precision::F64 => (ATAN2_F64, FINITE_F64),
    };
    let mut s = header(precision);
    let acc = accessors(parts);
    for part in
        [COMMON, atan2, finite, INTERACTIONS, GRID, BINDINGS, &acc].into_iter().chain(file.libraries.iter().copied())
    {
        s.push('\n');
        s.push_str(part);
    }
    s.push('\n');
    s.push_str(file.source);
    s
}

/// A binding an entry point uses: group, binding index and the WGSL variable name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsedBinding {
    pub group: u32,
    pub binding: u32,
    pub name: String,
}

/// A composed, validated module with its reflection.
pub struct Composed {
    pub source: String,
    pub module: naga::Module,
    /// Used bindings per entry point name, sorted by (group, binding).
    pub uses: BTreeMap<String, Vec<UsedBinding>>,
}

/// Composes, parses and validates a kernel file (f64 needs naga's FLOAT64 capability only).
pub fn compose_and_validate(file: &KernelFile, precision: Precision) -> Result<Composed, ShaderError> {
    compose_and_validate_parts(file, precision, Parts::One)
}

/// `compose_and_validate` with the per-particle arrays bound as `parts`.
pub fn compose_and_validate_parts(
    file: &KernelFile,
    precision: Precision,
    parts: Parts,
) -> Result<Composed, ShaderError> {
    let source = compose_parts(file, precision, parts);
    let prec = precision.as_str();
    let module = naga::front::wgsl::parse_str(&source).map_err(|e| ShaderError::Parse {
        file: file.name,
        precision: prec,
        message: e.emit_to_string(&source),
    })?;
    let caps = match precision {
        Precision::F32 => naga::valid::Capabilities::empty(),
        Precision::F64 => naga::valid::Capabilities::FLOAT64,
    };
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
        .validate(&module)
        .map_err(|e| ShaderError::Invalid { file: file.name, precision: prec, message: e.emit_to_string(&source) })?;
    let mut uses = BTreeMap::new();
    for entry in file.entry_points {
        let idx = module
            .entry_points
            .iter()
            .position(|ep| ep.name == *entry)
            .ok_or(ShaderError::MissingEntry { file: file.name, entry })?;
        let fi = info.get_entry_point(idx);
        let mut used: Vec<UsedBinding> = module
            .global_variables
            .iter()
            .filter(|(h, _)| !fi[*h].is_empty())
            .filter_map(|(_, g)| {
                g.binding.as_ref().map(|b| UsedBinding {
                    group: b.group,
                    binding: b.binding,
                    name: g.name.clone().unwrap_or_default(),
                })
            })
            .collect();
        used.sort_by_key(|u| (u.group, u.binding));
        uses.insert(entry.to_string(), used);
    }
    Ok(Composed { source, module, uses })
}

/// Size in bytes of a named struct type of a composed module, as WGSL lays it out.
pub fn struct_size(module: &naga::Module, name: &str) -> Option<u32> {
    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx()).ok()?;
    module.types.iter().find(|(_, t)| t.name.as_deref() == Some(name)).map(|(h, _)| layouter[h].size)
}

/// Member names and byte offsets of a named struct type of a composed module, in declaration
/// order, as WGSL lays it out (for the layout tests of the Rust mirrors).
pub fn struct_offsets(module: &naga::Module, name: &str) -> Option<Vec<(String, u32)>> {
    module.types.iter().find(|(_, t)| t.name.as_deref() == Some(name)).and_then(|(_, t)| match &t.inner {
        naga::TypeInner::Struct { members, .. } => {
            Some(members.iter().map(|m| (m.name.clone().unwrap_or_default(), m.offset)).collect())
        }
        _ => None,
    })
}

/// Bytes per element of the storage or uniform variable `name` of a composed module, as WGSL
/// lays it out: the array stride of an array, the size of anything else (for the tests that
/// hold the host's element sizes against the kernels').
pub fn binding_elem_size(module: &naga::Module, name: &str) -> Option<u32> {
    let (_, var) = module.global_variables.iter().find(|(_, g)| g.name.as_deref() == Some(name))?;
    if let naga::TypeInner::Array { stride, .. } = module.types[var.ty].inner {
        return Some(stride);
    }
    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx()).ok()?;
    Some(layouter[var.ty].size)
}

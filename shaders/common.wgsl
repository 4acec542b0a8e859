// Shared math for every kernel: vector and quaternion helpers written with glam's operation
// order (so f64 results track the CPU reference closely), the RRP update of MODEL §1, the
// simulation parameters, and the linear-id helper for 2-D folded dispatches.
// Composed after the generated header, which defines `real`, `WG`, `SCAN_WG` and `NQ`.

/// Mirrors `SimParams32` / `SimParams64` in src/gpu/params.rs (size and offsets checked by a
/// test): what every replica of the batch shares. The per-replica parameters are `ReplicaGpu`.
struct SimParams {
    /// Time step h.
    h: real,
    _pad_r0: real,
    _pad_r1: real,
    _pad_r2: real,
    /// Particles and bonds of the whole batch (every replica's, concatenated).
    n_particles: u32,
    n_bonds: u32,
    /// Bucket-table mask (table size − 1, table size = next_pow2(2N), N of the whole batch).
    mask: u32,
    /// 0 = rrp-newmark, 1 = rrp-exact, 2 = campello (`Integrator::code`).
    integrator: u32,
    /// Steps of the current `advance` (0 while evaluating the initial forces).
    batch_len: u32,
    /// Replicas in the batch.
    n_replicas: u32,
    /// Particles in the first part of the per-particle arrays bound in two parts (the
    /// generated `<name>_at` accessors); the particle count when they are bound whole.
    part_len: u32,
    /// 1 when `dload_*` already hold the dissipative loads of the state evaluated (every
    /// evaluation but an engine's first: after a load or a rollback they came with the state,
    /// from velocities it no longer holds), so that `dissipate` leaves them.
    keep_dload: u32,
    /// 1 where the host records the grid stage only at the batch's first step and its grid
    /// steps (`grid_recorded`), 0 where at every step; the grid steps are the batch steps s with
    /// (s + grid_phase) a multiple of GRID_PERIOD (`GridSteps` in src/gpu/params.rs).
    grid_fast: u32,
    grid_phase: u32,
    _pad_g0: u32,
    _pad_g1: u32,
}

/// Mirrors `ReplicaGpu32` / `ReplicaGpu64` in src/gpu/params.rs: one replica's parameters and
/// its ranges in the batch's arrays (element r of `reps`).
struct ReplicaGpu {
    /// Uniform gravity g (xyz; w unused).
    gravity: vec4<real>,
    /// Pendulum body-frame offset ρ0 (xyz).
    pend_rho0: vec4<real>,
    /// Pendulum unit direction `up` (xyz).
    pend_up: vec4<real>,
    /// Rupture: 1/t_c per channel (tension, shear, bending, twist); 0 = never breaks.
    rupture_inv: vec4<real>,
    /// Binder damping (γ_a, γ_s, γ_b, γ_t), MODEL §10.
    binder_gamma: vec4<real>,
    /// Contact dissipation (β, β_wall, μ, μ_wall), MODEL §10.
    damping: vec4<real>,
    k_bend: real,
    k_axial: real,
    k_shear: real,
    k_contact: real,
    k_wall: real,
    /// 1 / cell edge of the replica's contact grid.
    inv_cell: real,
    /// Pendulum field strength g.
    pend_g: real,
    /// Verlet skin: lists hold pairs closer than r_i + r_j + skin.
    skin: real,
    /// (skin/2)²: a particle that moved farther since the last rebuild triggers one.
    half_skin_sq: real,
    /// Edge of a grid cell, which is also the block of the positions (`cell`, see bindings.wgsl).
    cell_edge: real,
    /// Tangential to normal stiffness ratio κ (MODEL §10).
    stiffness_ratio: real,
    /// (EARLY_FRACTION · skin/2)²: the threshold of the early tests (FLAG_EARLY).
    early_skin_sq: real,
    /// The replica's particles are p_start .. p_start + n_particles of the batch.
    p_start: u32,
    n_particles: u32,
    /// Its bonds are b_start .. b_start + n_bonds (their ends are batch indices).
    b_start: u32,
    n_bonds: u32,
    /// Its walls are walls[wall_start .. wall_start + n_walls].
    wall_start: u32,
    n_walls: u32,
    /// 0 = paper, 1 = objective.
    shear_variant: u32,
    /// FLAG_GRAVITY: uniform gravity is on; FLAG_PENDULUM: the pendulum field is on;
    /// FLAG_RUPTURE: bonds may break; FLAG_HELD: the host froze the replica (nothing of it changes);
    /// FLAG_BOND_Q0: reference attitudes per bond (bond_q0), not per particle (q_ref);
    /// FLAG_BOND_REF: reference directions and lengths per bond (bond_ref), not formed from the
    /// reference positions (ref_pos, ref_cell); FLAG_WEIBULL: rupture thresholds scaled per bond
    /// (bond_scale); FLAG_DISSIPATE: dashpots (MODEL §10, `dload_*`); FLAG_UNLISTED: its
    /// contact lists leave its bonded pairs out (`bonded`).
    flags: u32,
    /// Rupture rule: 0 = any (largest ratio ≥ 1), 1 = sum (sum of the ratios ≥ 1).
    rupture_sum: u32,
    /// First word of its broken flags in bond_broken (a bit per bond, from a word boundary).
    broken_word: u32,
    /// Wall slots per particle of the wall history `whist` (the most walls of any replica).
    wall_slots: u32,
    /// Its steps at the start of the batch modulo GRID_PERIOD (`replica_grid_step`).
    grid_phase: u32,
    _pad_u0: u32,
    _pad_u1: u32,
    _pad_u2: u32,
    _pad_u3: u32,
}

/// A planar wall: point p and unit normal n pointing into the domain (xyz of each); p is stored
/// as positions are, a block of its replica's grid and an offset inside it (`point`).
struct WallGpu {
    point: vec4<real>,
    normal: vec4<real>,
    block: vec4<i32>,
    _pad_b0: i32,
    _pad_b1: i32,
    _pad_b2: i32,
    _pad_b3: i32,
}

/// Index of this invocation in a dispatch folded into 2-D (x ≤ 65535 workgroups per row).
fn linear_id(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, size: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * size + lid;
}

fn dot3(a: vec3<real>, b: vec3<real>) -> real {
    return a.x * b.x + a.y * b.y + a.z * b.z;
}

fn length3(a: vec3<real>) -> real {
    return sqrt(dot3(a, a));
}

/// a × b, component order as in glam.
fn cross3(a: vec3<real>, b: vec3<real>) -> vec3<real> {
    return vec3<real>(a.y * b.z - b.y * a.z, a.z * b.x - b.z * a.x, a.x * b.y - b.x * a.y);
}

/// Quaternions are vec4 (x, y, z, w). Hamilton product a ⊗ b.
fn quat_mul(a: vec4<real>, b: vec4<real>) -> vec4<real> {
    return vec4<real>(
        a.w * b.x + a.x * b.w + a.y * b.z - a.z * b.y,
        a.w * b.y - a.x * b.z + a.y * b.w + a.z * b.x,
        a.w * b.z + a.x * b.y - a.y * b.x + a.z * b.w,
        a.w * b.w - a.x * b.x - a.y * b.y - a.z * b.z,
    );
}

fn quat_conj(q: vec4<real>) -> vec4<real> {
    return vec4<real>(-q.x, -q.y, -q.z, q.w);
}

/// R(q) v = v (w² − |b|²) + 2 (v·b) b + 2 w (b × v), with b = q.xyz.
fn quat_rotate(q: vec4<real>, v: vec3<real>) -> vec3<real> {
    let b = q.xyz;
    let b2 = dot3(b, b);
    return v * (q.w * q.w - b2) + b * (dot3(v, b) * 2.0) + cross3(b, v) * (q.w * 2.0);
}

/// Homogeneous form of an RRP vector: q(α) = (α, 2) / sqrt(4 + |α|²).
fn quat_from_rrp(alpha: vec3<real>) -> vec4<real> {
    let inv = 1.0 / sqrt(4.0 + dot3(alpha, alpha));
    return vec4<real>(alpha.x * inv, alpha.y * inv, alpha.z * inv, 2.0 * inv);
}

/// q ← q(Δα) ⊗ q, renormalised (removes round-off only).
fn apply_increment(q: vec4<real>, dalpha: vec3<real>) -> vec4<real> {
    let p = quat_mul(quat_from_rrp(dalpha), q);
    let len = sqrt(p.x * p.x + p.y * p.y + p.z * p.z + p.w * p.w);
    return p * (1.0 / len);
}

/// 2 atan2(s, w) / s for s = |u| ≥ 0, w ≥ 0, with its series where s/w is small.
fn log_factor(s: real, w: real) -> real {
    if s < 1e-4 * w {
        let t = s / w;
        return 2.0 / w * (1.0 - t * t / 3.0);
    }
    return 2.0 * atan2_real(s, w) / s;
}

/// Rotation vector θ (|θ| ≤ π) of a unit quaternion (logarithm on SO(3)).
fn rotation_vector(q_in: vec4<real>) -> vec3<real> {
    var q = q_in;
    if q.w < 0.0 {
        q = -q;
    }
    let u = q.xyz;
    return u * log_factor(length3(u), q.w);
}

/// Δα of one step: h Ω (rrp-newmark, campello) or 2h/(1 + sqrt(1 − h²|Ω|²)) Ω (rrp-exact,
/// whose condition h²|Ω|² < 1 the caller has checked).
fn rotation_increment(integrator: u32, h: real, w: vec3<real>) -> vec3<real> {
    if integrator == 1u {
        let s = h * h * dot3(w, w);
        return w * (2.0 * h / (1.0 + sqrt(1.0 - s)));
    }
    return w * h;
}

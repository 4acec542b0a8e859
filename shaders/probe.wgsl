// Probe kernels for tests: the shared WGSL functions on lists of inputs, compared with their
// Rust twins by tests/gpu_probes.rs (f64 atan2 against f64::atan2, cell_hash against
// grid::cell_hash, finite_real against is_finite, rupture_measures and rupture against
// interactions::rupture, contact_dissipation and binder_damping against interactions::damping)
// and the device's own division, square root and a·b + c, compared with IEEE 754 by
// `gpu::arithmetic_on_device`.

@group(3) @binding(0) var<storage, read_write> atan_in: array<vec2<real>>;
@group(3) @binding(1) var<storage, read_write> atan_out: array<real>;
@group(3) @binding(2) var<storage, read_write> hash_in: array<vec4<i32>>;
@group(3) @binding(3) var<storage, read_write> hash_out: array<u32>;
@group(3) @binding(4) var<storage, read_write> finite_in: array<real>;
@group(3) @binding(5) var<storage, read_write> finite_out: array<u32>;
@group(3) @binding(6) var<storage, read_write> rupture_in: array<vec4<real>>;
@group(3) @binding(7) var<storage, read_write> rupture_out: array<real>;
@group(3) @binding(8) var<storage, read_write> arith_in: array<vec4<real>>;
@group(3) @binding(9) var<storage, read_write> arith_out: array<vec4<real>>;
@group(3) @binding(10) var<storage, read_write> damp_in: array<vec4<real>>;
@group(3) @binding(11) var<storage, read_write> damp_out: array<vec4<real>>;

@compute @workgroup_size(WG)
fn atan2_probe(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wid, nwg, lid, WG);
    if i < arrayLength(&atan_out) {
        let a = atan_in[i];
        atan_out[i] = atan2_real(a.x, a.y);
    }
}

/// hash_in[i] = (cx, cy, cz, mask as i32).
@compute @workgroup_size(WG)
fn cell_hash_probe(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wid, nwg, lid, WG);
    if i < arrayLength(&hash_out) {
        let c = hash_in[i];
        hash_out[i] = cell_hash(c.xyz, u32(c.w));
    }
}

/// finite_out[i] = 1 where finite_in[i] is finite.
@compute @workgroup_size(WG)
fn finite_probe(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wid, nwg, lid, WG);
    if i < arrayLength(&finite_out) {
        finite_out[i] = u32(finite_real(finite_in[i]));
    }
}

/// Case i: rupture_in[6i ..] = (d, L0), (d̂0, scale), ΔR_i, ΔR_j, 1/t_c, (variant, sum, 0, 0);
/// rupture_out[10i ..] = the four measures, the channel `rupture` returns for them (−1: holds),
/// the four bounds of `rupture_bounds` and the channel `bond_breaks` returns, both with
/// RUPTURE_SLACK (src/gpu/engine.rs reads them).
@compute @workgroup_size(WG)
fn rupture_probe(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wid, nwg, lid, WG);
    if i < arrayLength(&rupture_out) / 10u {
        let a = rupture_in[6u * i];
        let b = rupture_in[6u * i + 1u];
        let flags = rupture_in[6u * i + 5u];
        let dq_i = rupture_in[6u * i + 2u];
        let dq_j = rupture_in[6u * i + 3u];
        let variant = u32(flags.x);
        let sum = flags.y != 0.0;
        let m = rupture_measures(variant, a.xyz, a.w, b.xyz, dq_i, dq_j);
        let mode = rupture(m, rupture_in[6u * i + 4u], b.w, sum);
        let bounds = rupture_bounds(variant, a.xyz, a.w, b.xyz, dq_i, dq_j, RUPTURE_SLACK);
        let breaks = bond_breaks(variant, a.xyz, a.w, b.xyz, dq_i, dq_j, rupture_in[6u * i + 4u], b.w, sum,
                                 RUPTURE_SLACK);
        for (var c = 0u; c < 4u; c++) {
            rupture_out[10u * i + c] = m[c];
            rupture_out[10u * i + 5u + c] = bounds[c];
        }
        rupture_out[10u * i + 4u] = real(mode);
        rupture_out[10u * i + 9u] = real(breaks);
    }
}

/// arith_in[i] = (a, b, c, 0); arith_out[i] = (a / b, sqrt(a), a * b + c, 0), a ≥ 0: what the
/// device makes of the operations whose rounding IEEE 754 fixes (a driver may fuse a·b + c).
@compute @workgroup_size(WG)
fn arith_probe(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wid, nwg, lid, WG);
    if i < arrayLength(&arith_out) {
        let v = arith_in[i];
        arith_out[i] = vec4<real>(v.x / v.y, sqrt(v.x), v.x * v.y + v.z, 0.0);
    }
}

/// Case i: damp_in[8i ..] = (n, s), (f_el, k_h, m*, l_i), (l_j, h, β, μ), (dv, κ), (Ω_i, 0),
/// (Ω_j, 0), (ξ, 0), γ; damp_out[7i ..] = contact_dissipation's f_i, m_i, m_j, ξ, then
/// binder_damping's f_i, m_i, m_j for d = ξ and the same dv, Ω_i, Ω_j (w lanes 0).
@compute @workgroup_size(WG)
fn damping_probe(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wid, nwg, lid, WG);
    if i < arrayLength(&damp_out) / 7u {
        let a = damp_in[8u * i];
        let b = damp_in[8u * i + 1u];
        let c = damp_in[8u * i + 2u];
        let dv = damp_in[8u * i + 3u];
        let w_i = damp_in[8u * i + 4u].xyz;
        let w_j = damp_in[8u * i + 5u].xyz;
        let xi = damp_in[8u * i + 6u].xyz;
        let o = contact_dissipation(a.xyz, a.w, b.x, b.y, b.z, b.w, c.x, dv.xyz, w_i, w_j, xi, c.y, c.z, c.w, dv.w);
        let g = binder_damping(xi, dv.xyz, w_i, w_j, damp_in[8u * i + 7u]);
        damp_out[7u * i] = vec4<real>(o.f_i, 0.0);
        damp_out[7u * i + 1u] = vec4<real>(o.m_i, 0.0);
        damp_out[7u * i + 2u] = vec4<real>(o.m_j, 0.0);
        damp_out[7u * i + 3u] = vec4<real>(o.xi, 0.0);
        damp_out[7u * i + 4u] = vec4<real>(g.f_i, 0.0);
        damp_out[7u * i + 5u] = vec4<real>(g.m_i, 0.0);
        damp_out[7u * i + 6u] = vec4<real>(g.m_j, 0.0);
    }
}

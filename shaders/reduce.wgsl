// Diagnostics (MODEL §4) as deterministic tree reductions: `reduce_state` sums the NQ
// quantities of WG particles and WG bonds per workgroup; `reduce_partials` sums WG records per
// workgroup, level after level, until one record is left. Record layout (NQ reals):
// E_trans, E_rot, U_bend, U_axial, U_shear, U_contact, U_wall, U_gravity, P (3), S (3), L (3).

/// Number of records in `red_in` at this level (x).
@group(3) @binding(0) var<uniform> red_len: vec4<u32>;
@group(3) @binding(1) var<storage, read_write> red_in: array<real>;
@group(3) @binding(2) var<storage, read_write> red_out: array<real>;

var<workgroup> red_sh: array<real, NQ * WG>;

/// Tree sum over the workgroup of red_sh[q·WG + lid]; lane 0 writes the record of `group`.
fn reduce_workgroup(lid: u32, group: u32, n_groups: u32) {
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if lid < stride {
            for (var q = 0u; q < NQ; q++) {
                red_sh[q * WG + lid] = red_sh[q * WG + lid] + red_sh[q * WG + lid + stride];
            }
        }
        workgroupBarrier();
    }
    if lid == 0u && group < n_groups {
        for (var q = 0u; q < NQ; q++) {
            red_out[group * NQ + q] = red_sh[q * WG];
        }
    }
}

@compute @workgroup_size(WG)
fn reduce_state(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let t = linear_id(wid, nwg, lid, WG);
    for (var q = 0u; q < NQ; q++) {
        red_sh[q * WG + lid] = 0.0;
    }
    if t < params.n_particles {
        let inv = inertial[t];
        let m = inv.x;
        let jm = inv.y;
        let v = vel[t].xyz;
        let w = omega[t].xyz;
        let x = pos[t].xyz;
        let u = pot[t];
        let p = m * v;
        let s = jm * w;
        let l = cross3(x, p) + s;
        red_sh[0u * WG + lid] = 0.5 * m * dot3(v, v);
        red_sh[1u * WG + lid] = 0.5 * jm * dot3(w, w);
        red_sh[5u * WG + lid] = u.x;
        red_sh[6u * WG + lid] = u.y;
        red_sh[7u * WG + lid] = u.z;
        red_sh[8u * WG + lid] = p.x;
        red_sh[9u * WG + lid] = p.y;
        red_sh[10u * WG + lid] = p.z;
        red_sh[11u * WG + lid] = s.x;
        red_sh[12u * WG + lid] = s.y;
        red_sh[13u * WG + lid] = s.z;
        red_sh[14u * WG + lid] = l.x;
        red_sh[15u * WG + lid] = l.y;
        red_sh[16u * WG + lid] = l.z;
    }
    if t < params.n_bonds {
        let o = bond_out[t];
        red_sh[2u * WG + lid] = o.f_i.w;
        red_sh[3u * WG + lid] = o.m_i.w;
        red_sh[4u * WG + lid] = o.m_j.w;
    }
    reduce_workgroup(lid, wid.y * nwg.x + wid.x, red_len.x);
}

@compute @workgroup_size(WG)
fn reduce_partials(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let t = linear_id(wid, nwg, lid, WG);
    let n = red_len.y;
    for (var q = 0u; q < NQ; q++) {
        var v: real = 0.0;
        if t < n {
            v = red_in[t * NQ + q];
        }
        red_sh[q * WG + lid] = v;
    }
    reduce_workgroup(lid, wid.y * nwg.x + wid.x, red_len.x);
}

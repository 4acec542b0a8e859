// Diagnostics (MODEL §4) as deterministic tree reductions: `reduce_state` sums the NQ
// quantities of WG particles and WG bonds per workgroup; `reduce_partials` sums WG records per
// workgroup, level after level, until one record is left. Record layout (NQ reals, slots REC_*
// from the generated header): E_trans, E_rot, U_bend, U_axial, U_shear, U_contact, U_wall,
// U_gravity, P (3), S (3), L (3), F_wall (3), Σ m x (3, relative to the position origin).

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
        red_sh[REC_E_TRANS * WG + lid] = 0.5 * m * dot3(v, v);
        red_sh[REC_E_ROT * WG + lid] = 0.5 * jm * dot3(w, w);
        red_sh[REC_U_CONTACT * WG + lid] = u.x;
        red_sh[REC_U_WALL * WG + lid] = u.y;
        red_sh[REC_U_GRAVITY * WG + lid] = u.z;
        // The wall force is recomputed here from the state rather than stored by the particle
        // kernel every step: the same pure function of the same inputs, needed only at records,
        // so it costs no per-particle buffer and no per-step write.
        var f_wall = vec3<real>(0.0);
        for (var k = 0u; k < params.n_walls; k++) {
            f_wall = f_wall + wall(x, pos[t].w, walls[k].point.xyz, walls[k].normal.xyz, params.k_wall).force;
        }
        let mx = m * x;
        for (var c = 0u; c < 3u; c++) {
            red_sh[(REC_P + c) * WG + lid] = p[c];
            red_sh[(REC_S + c) * WG + lid] = s[c];
            red_sh[(REC_L + c) * WG + lid] = l[c];
            red_sh[(REC_F_WALL + c) * WG + lid] = f_wall[c];
            red_sh[(REC_MASS_X + c) * WG + lid] = mx[c];
        }
    }
    if t < params.n_bonds {
        let o = bond_out[t];
        red_sh[REC_U_BEND * WG + lid] = o.f_i.w;
        red_sh[REC_U_AXIAL * WG + lid] = o.m_i.w;
        red_sh[REC_U_SHEAR * WG + lid] = o.m_j.w;
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

// Diagnostics (MODEL §4) as deterministic tree reductions: `reduce_state` sums the NQ
// quantities of WG particles and WG bonds per workgroup; `reduce_partials` sums WG records per
// workgroup, level after level, until one record is left. Record layout (NQ reals, slots REC_*
// from the generated header): E_trans, E_rot, U_bend, U_axial, U_shear, U_contact, U_wall,
// U_gravity, P (3), S (3), L (3), F_wall (3), Σ m x (3, relative to the position origin),
// E_dissipated.

// Batches: the sums are segmented by replica, in an order that depends only on replica-relative
// indices, so that a replica's record is bit for bit the one of the same model alone. A host-built
// chunk table (`red_table`, src/gpu/batch.rs) gives each workgroup its work: at the first level,
// (replica, first replica-relative item) of its WG items (particle t and bond t of the replica
// paired, as in one model); at each further level, (first record, count, copy) of the WG records
// of one replica it sums, or with `copy` the one record of a replica already reduced, passed on
// as it is. Outputs are laid out replica after replica, so the last level holds record r for
// replica r. With one replica this is the plain tree over WG items, then WG records, … .

/// Workgroups of this level (x) and the offset of its entries in `red_table` (y).
@group(3) @binding(0) var<uniform> red_len: vec4<u32>;
@group(3) @binding(1) var<storage, read_write> red_in: array<real>;
@group(3) @binding(2) var<storage, read_write> red_out: array<real>;
@group(3) @binding(3) var<storage, read> red_table: array<vec4<u32>>;

/// Records of NQ reals (`tree_sum`, shaders/tree.wgsl).
const RQ: u32 = NQ;

/// Tree sum over the workgroup of tree_sh[q·WG + lid]; lane 0 writes the record of `group`.
fn reduce_workgroup(lid: u32, group: u32, n_groups: u32) {
    tree_sum(lid);
    if lid == 0u && group < n_groups {
        for (var q = 0u; q < NQ; q++) {
            red_out[group * NQ + q] = tree_sh[q * WG];
        }
    }
}

/// This workgroup's entry of the chunk table (zeros past the level's end).
fn table_entry(group: u32) -> vec4<u32> {
    if group < red_len.x {
        return red_table[red_len.y + group];
    }
    return vec4<u32>(0u);
}

@compute @workgroup_size(WG)
fn reduce_state(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    // Workgroups are dispatched in chunks whose bonds fit one window of bond_out (ChunkGpu).
    let group = chunk.group_base + wid.y * nwg.x + wid.x;
    let entry = table_entry(group);
    // Replica-relative item of this lane; past the level's end, no item (n = 0 below).
    let t = entry.y + lid;
    var rp_n = 0u;
    var rb_n = 0u;
    var p0 = 0u;
    var b0 = 0u;
    if group < red_len.x {
        let rp = reps[entry.x];
        rp_n = rp.n_particles;
        rb_n = rp.n_bonds;
        p0 = rp.p_start;
        b0 = rp.b_start;
    }
    for (var q = 0u; q < NQ; q++) {
        tree_sh[q * WG + lid] = 0.0;
    }
    if t < rp_n {
        let i = p0 + t;
        let r = entry.x;
        let inv = inertial_at(i);
        let m = inv.x;
        let jm = inv.y;
        let v = vel_at(i).xyz;
        let w = omega_at(i).xyz;
        let edge = reps[r].cell_edge;
        let x = position_from_origin(i, edge);
        let u = pot_at(i);
        let p = m * v;
        let s = jm * w;
        let l = cross3(x, p) + s;
        tree_sh[REC_E_TRANS * WG + lid] = 0.5 * m * dot3(v, v);
        tree_sh[REC_E_ROT * WG + lid] = 0.5 * jm * dot3(w, w);
        tree_sh[REC_U_CONTACT * WG + lid] = u.x;
        tree_sh[REC_U_WALL * WG + lid] = u.y;
        tree_sh[REC_U_GRAVITY * WG + lid] = u.z;
        tree_sh[REC_E_DISS * WG + lid] = dissipated_at(r, i);
        let f_wall = wall_force_at(r, i);
        let mx = m * x;
        for (var c = 0u; c < 3u; c++) {
            tree_sh[(REC_P + c) * WG + lid] = p[c];
            tree_sh[(REC_S + c) * WG + lid] = s[c];
            tree_sh[(REC_L + c) * WG + lid] = l[c];
            tree_sh[(REC_F_WALL + c) * WG + lid] = f_wall[c];
            tree_sh[(REC_MASS_X + c) * WG + lid] = mx[c];
        }
    }
    if t < rb_n {
        let o = bond_out[b0 + t - chunk.bond_win];
        // A bond broken at this evaluation holds its released energy (`broke_now`): it has no
        // energy of its own any more.
        if !broke_now(o) {
            tree_sh[REC_U_BEND * WG + lid] = o.f_i.w;
            tree_sh[REC_U_AXIAL * WG + lid] = o.m_i.w;
            tree_sh[REC_U_SHEAR * WG + lid] = o.m_j.w;
        }
    }
    reduce_workgroup(lid, group, red_len.x);
}

@compute @workgroup_size(WG)
fn reduce_partials(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let group = wid.y * nwg.x + wid.x;
    let entry = table_entry(group);
    for (var q = 0u; q < NQ; q++) {
        var v: real = 0.0;
        if lid < entry.y {
            v = red_in[(entry.x + lid) * NQ + q];
        }
        tree_sh[q * WG + lid] = v;
    }
    reduce_workgroup(lid, group, red_len.x);
    // A replica already down to one record: its record unchanged (a sum with zeros could turn a
    // −0 into +0, which the same model alone would not).
    if lid == 0u && group < red_len.x && entry.z != 0u {
        for (var q = 0u; q < NQ; q++) {
            red_out[group * NQ + q] = red_in[entry.x * NQ + q];
        }
    }
}

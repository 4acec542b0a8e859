// Per-particle kernel: total force and spatial moment at the current state (bond results
// gathered through the CSR incidence in bond order, contacts from the Verlet list or, for an
// overflowed list, the grid, both in the CPU's neighbour order, walls, gravity, pendulum), the particle's potential energies, then the
// closing kick of maps 23/25, fused with the next step's opening kick inside a batch.

/// Kicks after the force evaluation, in units of ½h: 0 for campello and for the initial
/// evaluation, 1 (closing half kick) at the last step of a batch, 2 (closing + next opening
/// half kick, applied as two half kicks so the arithmetic equals the CPU's) before.
fn half_kicks_post(step: u32) -> u32 {
    if params.integrator == 2u || params.batch_len == 0u {
        return 0u;
    }
    if step + 1u >= params.batch_len {
        return 1u;
    }
    return 2u;
}

@compute @workgroup_size(WG)
fn particle(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wid, nwg, lid, WG);
    if i >= params.n_particles || frozen() {
        return;
    }
    let step = current_step();
    var fi = vec3<real>(0.0);
    var mi = vec3<real>(0.0);
    for (var p = inc_offsets[i]; p < inc_offsets[i + 1u]; p++) {
        let e = inc_entries[p];
        let o = bond_out[e >> 1u];
        if (e & 1u) == 0u {
            fi = fi + o.f_i.xyz;
            mi = mi + o.m_i.xyz;
        } else {
            fi = fi - o.f_i.xyz;
            mi = mi + o.m_j.xyz;
        }
    }
    let xr = pos[i];
    let xi = xr.xyz;
    var u_contact: real = 0.0;
    let cnt = nbr_count[i];
    if cnt <= params.nbr_capacity {
        // Verlet list: the candidates of the last rebuild, in the grid's order.
        let base = i * params.nbr_capacity;
        for (var k = 0u; k < cnt; k++) {
            let j = nbr[base + k];
            let xj = pos[j];
            let ct = contact(xi - xj.xyz, xr.w + xj.w, params.k_contact);
            fi = fi + ct.force;
            if j > i {
                u_contact = u_contact + ct.energy;
            }
        }
    } else {
        // The list overflowed: search the grid, which an overflow keeps fresh every step.
        let c = cell[i].xyz;
        for (var k = 0; k < 27; k++) {
            let nc = neighbour_cell(c, k);
            let b = cell_hash(nc, params.mask);
            for (var p = bucket_start[b]; p < bucket_start[b + 1u]; p++) {
                let sc = sorted_cell[p];
                let j = u32(sc.w);
                if j != i && all(sc.xyz == nc) {
                    let xj = sorted_pos[p];
                    let ct = contact(xi - xj.xyz, xr.w + xj.w, params.k_contact);
                    fi = fi + ct.force;
                    if j > i {
                        u_contact = u_contact + ct.energy;
                    }
                }
            }
        }
    }
    var u_wall: real = 0.0;
    for (var w = 0u; w < params.n_walls; w++) {
        let ct = wall(xi, xr.w, walls[w].point.xyz, walls[w].normal.xyz, params.k_wall);
        fi = fi + ct.force;
        u_wall = u_wall + ct.energy;
    }
    let inv = inertial[i];
    var u_grav: real = 0.0;
    if (params.flags & 1u) != 0u {
        let g = gravity(xi, inv.x, params.gravity.xyz);
        fi = fi + g.force;
        u_grav = u_grav + g.energy;
    }
    if (params.flags & 2u) != 0u {
        let g = pendulum(quat[i], inv.x, params.pend_g, params.pend_rho0.xyz, params.pend_up.xyz);
        mi = mi + g.moment;
        u_grav = u_grav + g.energy;
    }
    force[i] = vec4<real>(fi, 0.0);
    moment[i] = vec4<real>(mi, 0.0);
    pot[i] = vec4<real>(u_contact, u_wall, u_grav, 0.0);
    var v = vel[i].xyz;
    var w = omega[i].xyz;
    let kicks = half_kicks_post(step);
    if fixed[i] == 0u && kicks != 0u {
        let a = fi * (0.5 * params.h * inv.z);
        let b = mi * (0.5 * params.h * inv.w);
        for (var k = 0u; k < kicks; k++) {
            v = v + a;
            w = w + b;
        }
        vel[i] = vec4<real>(v, 0.0);
        omega[i] = vec4<real>(w, 0.0);
    }
    if !(finite3(xi) && finite3(v) && finite3(w) && finite3(fi) && finite3(mi)) {
        report_bad(step, i);
    }
    if i == 0u {
        step_next[0] = step + 1u;
    }
}

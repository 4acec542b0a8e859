// Per-particle kernel: total force and spatial moment at the current state (bond results
// gathered through the CSR incidence in bond order, contacts from the Verlet list or, for an
// overflowed list, the grid, both in particle-index order as on the CPU, walls, gravity,
// pendulum, then the dissipative loads of `dload_*`), the particle's potential energies, then the
// closing kick of maps 23/25, fused with the next step's opening kick inside a batch, each kick
// booking its dissipated work; and the particle's share of the watch's sums.

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
    // Particle i of the batch, in this dispatch's chunk (see ChunkGpu).
    let i = chunk.p_first + linear_id(wid, nwg, lid, WG);
    if i >= chunk.p_end {
        return;
    }
    let step = current_step();
    // The step counter runs on after a failure too, so that `frozen` keeps telling earlier
    // steps from this one.
    if i == 0u {
        step_next[0] = step + 1u;
    }
    let r = replica_of(i);
    if frozen(r, step) {
        return;
    }
    let k_contact = reps[r].k_contact;
    let edge = reps[r].cell_edge;
    var fi = vec3<real>(0.0);
    var mi = vec3<real>(0.0);
    // The bonds' energies, each counted at its end i, and what bonds that broke at this
    // evaluation released (for the watch, shaders/watch.wgsl).
    var u_bond: real = 0.0;
    var released: real = 0.0;
    // Bonds below this chunk's window of bond_out come from the halo, in incidence order.
    var far = halo_off[i];
    for (var p = inc_offsets[i]; p < inc_offsets[i + 1u]; p++) {
        let e = inc_entries[p - chunk.inc_win];
        var o: BondOutGpu;
        if (e >> 1u) < chunk.bond_win {
            o = halo[far];
            far++;
        } else {
            o = bond_out[(e >> 1u) - chunk.bond_win];
        }
        if (e & 1u) == 0u {
            fi = fi + o.f_i.xyz;
            mi = mi + o.m_i.xyz;
            if broke_now(o) {
                released = released + o.f_i.w;
            } else {
                u_bond = u_bond + o.f_i.w + o.m_i.w + o.m_j.w;
            }
        } else {
            fi = fi - o.f_i.xyz;
            mi = mi + o.m_j.xyz;
        }
    }
    let xr = pos_at(i);
    // Offset and block of x_i: pair vectors come from both (`block_vector`).
    let xi = xr.xyz;
    let c = cell_at(i).xyz;
    var u_contact: real = 0.0;
    let cnt = nbr_count[i];
    let base = nbr_offsets[i];
    if cnt <= nbr_offsets[i + 1u] - base {
        // Verlet list: the candidates of the last rebuild, by index (`grid::NeighbourList::
        // listed`; bonded pairs' contacts go with their bonds where the list leaves them out).
        var walk = list_walk_start(i, r, base, cnt, false);
        loop {
            let j = list_walk_next(&walk);
            if j == NO_PARTNER {
                break;
            }
            let xj = pos_at(j);
            let ct = contact(block_vector(c, xi - xj.xyz, cell_at(j).xyz, edge), xr.w + xj.w, k_contact);
            fi = fi + ct.force;
            if j > i {
                u_contact = u_contact + ct.energy;
            }
        }
    } else {
        // The list overflowed: the grid (rebuilt every step while a list overflows), visited in
        // index order like a list (shaders/walk.wgsl).
        var walk = grid_walk_start(c, r, i);
        let skip_bonded = bond_contacts(r);
        loop {
            let at = grid_walk_next(&walk);
            if at.x == STATUS_NONE {
                break;
            }
            // Bonded pairs' contacts went with their bonds (`bond_contacts`).
            if skip_bonded && is_bonded(i, at.z) {
                continue;
            }
            let xj = sorted_pos_at(at.x);
            let d = block_vector(c, xi - xj.xyz, neighbour_cell(c, i32(at.y)), edge);
            let ct = contact(d, xr.w + xj.w, k_contact);
            fi = fi + ct.force;
            if at.z > i {
                u_contact = u_contact + ct.energy;
            }
        }
    }
    if bond_contacts(r) {
        // The bond kernel added each bonded pair's contact force to its bond's; its energy is
        // counted here, at the pair's lower index, as every contact's is.
        for (var p = inc_offsets[i]; p < inc_offsets[i + 1u]; p++) {
            let j = bonded[p - chunk.inc_win];
            // (NO_PARTNER fills the slots a repeated pair leaves free.)
            if j > i && j != NO_PARTNER {
                let xj = pos_at(j);
                u_contact = u_contact + contact(block_vector(c, xi - xj.xyz, cell_at(j).xyz, edge), xr.w + xj.w, k_contact).energy;
            }
        }
    }
    var u_wall: real = 0.0;
    for (var w = reps[r].wall_start; w < reps[r].wall_start + reps[r].n_walls; w++) {
        // x_i from the wall's block, so that x − p is resolved as finely as a pair vector.
        let xw = block_vector(c, xi, walls[w].block.xyz, edge);
        let ct = wall(xw, xr.w, walls[w].point.xyz, walls[w].normal.xyz, reps[r].k_wall);
        fi = fi + ct.force;
        u_wall = u_wall + ct.energy;
    }
    // The own particle's values (`PARTICLE_OWN`) in the part this chunk binds.
    let o = i - chunk.part_win;
    let inv = inertial[o];
    var u_grav: real = 0.0;
    if (reps[r].flags & FLAG_GRAVITY) != 0u {
        let g = gravity(block_vector(c, xi, vec3<i32>(0), edge), inv.x, reps[r].gravity.xyz);
        fi = fi + g.force;
        u_grav = u_grav + g.energy;
    }
    if (reps[r].flags & FLAG_PENDULUM) != 0u {
        let g = pendulum(quat[o], inv.x, reps[r].pend_g, reps[r].pend_rho0.xyz, reps[r].pend_up.xyz);
        mi = mi + g.moment;
        u_grav = u_grav + g.energy;
    }
    let diss = dissipates(r);
    // The dissipative loads (shaders/dissipation.wgsl) and the particle's ledger, read once.
    var d_f = vec3<real>(0.0);
    var d_m = vec3<real>(0.0);
    var ledger = vec2<real>(0.0);
    if diss {
        let a = dload_force_at(i);
        let b = dload_moment_at(i);
        d_f = a.xyz;
        d_m = b.xyz;
        ledger = vec2<real>(a.w, b.w);
        // After the conservative loads, as on the CPU.
        fi = fi + d_f;
        mi = mi + d_m;
    }
    var v = vel[o].xyz;
    var w = omega[o].xyz;
    let kicks = half_kicks_post(step);
    // The velocities of the state just evaluated (after its closing half kick), for the watch.
    var v_now = v;
    var w_now = w;
    // The ledger at that state too (the watch's, `dissipated_node_at`).
    var ledger_now = ledger;
    if !is_fixed(i) && kicks != 0u {
        let a = fi * (0.5 * params.h * inv.z);
        let b = mi * (0.5 * params.h * inv.w);
        for (var k = 0u; k < kicks; k++) {
            let v0 = v;
            let w0 = w;
            v = v + a;
            w = w + b;
            if k == 0u {
                v_now = v;
                w_now = w;
            }
            if diss {
                // The ledger, kick by kick (MODEL §10).
                ledger = ledger_step(ledger, -kick_work(0.5 * params.h, d_f, d_m, v0, v, w0, w));
                if k == 0u {
                    ledger_now = ledger;
                }
            }
        }
        vel[o] = vec4<real>(v, 0.0);
        omega[o] = vec4<real>(w, 0.0);
        if diss {
            dload_force_put(i, vec4<real>(d_f, ledger.x));
            dload_moment_put(i, vec4<real>(d_m, ledger.y));
        }
    }
    if diss {
        dload_wall_put_w(i, ledger_now.x - ledger_now.y);
    }
    // What the watch sums (shaders/watch.wgsl): the particle's mechanical energy (kinetic,
    // contacts, walls, its bonds), the energy its bonds released, and m v·n along the replica's
    // first contacted wall, in the lanes these arrays leave free.
    let mechanical = 0.5 * inv.x * dot3(v_now, v_now) + 0.5 * inv.y * dot3(w_now, w_now) + u_contact + u_wall + u_bond;
    force[o] = vec4<real>(fi, released);
    moment[o] = vec4<real>(mi, inv.x * dot3(v_now, contact_normal(r)));
    pot[o] = vec4<real>(u_contact, u_wall, u_grav, mechanical);
    // What the CPU's check_finite checks: x, v, q, Ω, F, M (on their bits, see finite_f32.wgsl).
    if !(finite3(xi) && finite3(v) && finite4(quat[o]) && finite3(w) && finite3(fi) && finite3(mi)) {
        report_bad(r, step, i);
    }
}

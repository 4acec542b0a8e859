// Dissipative loads of MODEL §10 (twin of `DissPass::particle`, src/engine/cpu/dissipation.rs):
// per particle of a dissipating replica, the viscous binder of its intact bonds (in incidence
// order, each bond evaluated from its own ends as the CPU's bond pass does), then the normal
// dashpots of its contacts (partners in index order, from the Verlet list merged with the bonded
// partners it leaves out or, for an overflowed list, the grid walk: shaders/walk.wgsl) and of
// its walls (in wall order), in the CPU's order, from the positions of this evaluation and the
// velocities the step already knows (v_{k+½}, Ω_{k+½}: right-endpoint
// forcing), with the spring–sliders of the frictional contacts, whose history ξ it reads from
// particle i's own row of `hist_*`/`whist` and rewrites there (shaders/bindings.wgsl: each
// pair's ξ kept by both its particles). Written into `dload_*` before the particle
// kernel adds them: a kernel of its own, since the particle kernel kicks the velocities this one
// reads at the partners.

@compute @workgroup_size(WG)
fn dissipate(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = chunk.p_first + linear_id(wid, nwg, lid, WG);
    if i >= chunk.p_end {
        return;
    }
    let r = replica_of(i);
    // In an evaluation that keeps `dload_*` (`SimParams::keep_dload`) only a step computes it.
    if !dissipates(r) || (params.keep_dload != 0u && params.batch_len == 0u) || frozen(r, current_step()) {
        return;
    }
    let edge = reps[r].cell_edge;
    let beta = reps[r].damping.x;
    let beta_wall = reps[r].damping.y;
    let mu = reps[r].damping.z;
    let mu_wall = reps[r].damping.w;
    let kappa = reps[r].stiffness_ratio;
    let step = current_step();
    // Particle i's row of the contact history, read and then rewritten in place (only i uses it).
    let row = hist_row(i);
    let h = params.h;
    let xr = pos_at(i);
    let xi = xr.xyz;
    let ri = xr.w;
    let c = cell_at(i).xyz;
    let vi = vel_at(i).xyz;
    let wi = omega_at(i).xyz;
    let inv_i = inertial_at(i).z;
    let zero = vec3<real>(0.0);
    var f = zero;
    var m = zero;
    var f_wall = zero;
    // The binder's dashpots first, in incidence (bond) order: the CPU's order (its bond pass
    // gathers them per particle in bond order before the contacts' and walls'). Each end
    // evaluates its bond from the bond's own ends (i, j), so both get the values the CPU's one
    // evaluation per bond gives; evaluating twice costs less memory traffic than writing the
    // nine reals per bond for the other end to read (lavapipe, fcc-2e4+damped in f64: about 10 %
    // slower that way).
    let gamma = reps[r].binder_gamma;
    // The host's test (`Dissipation::binder`, which also decides that `inc_peer` is real).
    if any(gamma > vec4<real>(0.0)) {
        let rupture = (reps[r].flags & FLAG_RUPTURE) != 0u;
        for (var p = inc_offsets[i]; p < inc_offsets[i + 1u]; p++) {
            let e = inc_entries[p - chunk.inc_win];
            let b = e >> 1u;
            if rupture {
                // Broken, at this evaluation too (the bond kernel ran before): exerts nothing.
                let bit = broken_bit(r, b);
                if (atomicLoad(&bond_broken[bit.x]) & bit.y) != 0u {
                    continue;
                }
            }
            // The bond's ends (i, j) in its own order: this particle and its peer.
            let peer = inc_peer[p - chunk.inc_win];
            var ends = vec2<u32>(i, peer);
            if (e & 1u) != 0u {
                ends = vec2<u32>(peer, i);
            }
            let o = binder_damping(pair_vector(ends.x, ends.y, edge), vel_at(ends.x).xyz - vel_at(ends.y).xyz,
                                   omega_at(ends.x).xyz, omega_at(ends.y).xyz, gamma);
            if (e & 1u) == 0u {
                f = f + o.f_i;
                m = m + o.m_i;
            } else {
                f = f - o.f_i;
                m = m + o.m_j;
            }
        }
    }
    if beta > 0.0 || mu > 0.0 {
        let k_contact = reps[r].k_contact;
        // The row's old contacts come in partner order, as the walk visits them: a cursor `own`
        // over them, read where they are, while the new row is written over the old one from its
        // start (`written` entries so far). A new contact writes a slot whose old contact the
        // cursor has not reached yet: that one is kept first in `kept`, a queue of the old
        // contacts at `own .. min(written, own_count)` in order (empty while own ≥ written), and
        // read from there. Only a step in which the particle gains a contact queues any (at most
        // the rest of its row): the old row is no longer copied into private memory each step,
        // which a GPU keeps in its thread-local memory (up to 576 B per particle in f64, written
        // and read again; the arrays' zero initialisation, which WGSL requires, may remain).
        var own = 0u;
        var own_count = 0u;
        var written = 0u;
        var kept_key: array<u32, HIST_SLOTS>;
        var kept_xi: array<vec3<real>, HIST_SLOTS>;
        var kept_head = 0u;
        var kept_len = 0u;
        if mu > 0.0 {
            own_count = hist_count[row];
        }
        let cnt = nbr_count[i];
        let base = nbr_offsets[i];
        let listed = cnt <= nbr_offsets[i + 1u] - base;
        var walk: GridWalk;
        var list_walk: ListWalk;
        if listed {
            list_walk = list_walk_start(i, r, base, cnt);
        } else {
            walk = grid_walk_start(c, r, i);
        }
        loop {
            // The next partner j and x_i − x_j, from the list or the grid walk.
            var j: u32;
            var d: vec3<real>;
            var rj: real;
            if listed {
                j = list_walk_next(&list_walk);
                if j == NO_PARTNER {
                    break;
                }
                let xj = pos_at(j);
                d = block_vector(c, xi - xj.xyz, cell_at(j).xyz, edge);
                rj = xj.w;
            } else {
                let at = grid_walk_next(&walk);
                if at.x == STATUS_NONE {
                    break;
                }
                j = at.z;
                let xj = sorted_pos_at(at.x);
                d = block_vector(c, xi - xj.xyz, neighbour_cell(c, i32(at.y)), edge);
                rj = xj.w;
            }
            let rs = ri + rj;
            let l2 = dot3(d, d);
            let inv = inv_i + inertial_at(j).z;
            if l2 < rs * rs && l2 > 0.0 && inv > 0.0 {
                let l = sqrt(l2);
                let s = rs - l;
                if s > 0.0 {
                    let k_h = hertz_constant(k_contact, rs);
                    // ξ of the pair seen from i (i's own copy; j keeps the negated one).
                    var xi_in = zero;
                    if mu > 0.0 {
                        // Old contacts before j are gone; the one with j, if any, is taken (the
                        // next partner comes after it).
                        loop {
                            if own >= own_count {
                                break;
                            }
                            // Overwritten already (queued), or still in the row.
                            let queued = own < written;
                            var key: u32;
                            if queued {
                                key = kept_key[kept_head];
                            } else {
                                key = hist_key[row * HIST_SLOTS + own];
                            }
                            if key > j {
                                break;
                            }
                            if key == j {
                                if queued {
                                    xi_in = kept_xi[kept_head];
                                } else {
                                    xi_in = hist_xi[row * HIST_SLOTS + own].xyz;
                                }
                            }
                            if queued {
                                kept_head = (kept_head + 1u) % HIST_SLOTS;
                                kept_len--;
                            }
                            own++;
                            if key == j {
                                break;
                            }
                        }
                    }
                    // Both ends evaluate the pair as its lower index sees it (`lo` the lower
                    // index's side): the same operations on the same values, so the same bits at
                    // both ends even where a compiler fuses products into sums differently for
                    // swapped operands (with IEEE rounding the function is odd under the exchange
                    // of the ends, so this is also each end's own view, as on the CPU).
                    let lo = i < j;
                    let sign = select(real(-1.0), real(1.0), lo);
                    let vj = vel_at(j).xyz;
                    let wj = omega_at(j).xyz;
                    let o = contact_dissipation((d * sign) / l, s, k_h * s * sqrt(s), k_h, 1.0 / inv,
                                                l * select(rj, ri, lo) / rs, l * select(ri, rj, lo) / rs,
                                                select(vj - vi, vi - vj, lo), select(wj, wi, lo), select(wi, wj, lo),
                                                xi_in * sign, h, beta, mu, kappa);
                    f = f + o.f_i * sign;
                    m = m + select(o.m_j, o.m_i, lo);
                    if mu > 0.0 {
                        if written < HIST_SLOTS {
                            // An old contact the cursor has not reached is queued first.
                            if written >= own && written < own_count {
                                let tail = (kept_head + kept_len) % HIST_SLOTS;
                                kept_key[tail] = hist_key[row * HIST_SLOTS + written];
                                kept_xi[tail] = hist_xi[row * HIST_SLOTS + written].xyz;
                                kept_len++;
                            }
                            hist_key[row * HIST_SLOTS + written] = j;
                            hist_xi[row * HIST_SLOTS + written] = vec4<real>(o.xi * sign, 0.0);
                        }
                        written++;
                    }
                }
            }
        }
        if mu > 0.0 {
            hist_count[row] = min(written, HIST_SLOTS);
            if written > HIST_SLOTS {
                // More contacts than the history holds: the replica fails (lowest particle of
                // its first such step), and the host says why.
                atomicMin(&status[rslot(r, RSTATUS_HIST_STEP)], step);
                atomicMin(&status[rslot(r, RSTATUS_HIST_PARTICLE)], i);
            }
        }
    }
    if (beta_wall > 0.0 || mu_wall > 0.0) && inv_i > 0.0 {
        let slots = reps[r].wall_slots;
        for (var w = reps[r].wall_start; w < reps[r].wall_start + reps[r].n_walls; w++) {
            let xw = block_vector(c, xi, walls[w].block.xyz, edge);
            let gap = dot3(xw - walls[w].point.xyz, walls[w].normal.xyz);
            let s = ri - gap;
            let slot = w - reps[r].wall_start;
            var xi_new = zero;
            if 1.0 - gap / ri > 0.0 && s > 0.0 {
                let k_h = hertz_constant(reps[r].k_wall, ri);
                var xi_in = zero;
                if mu_wall > 0.0 {
                    xi_in = whist[row * slots + slot].xyz;
                }
                let o = contact_dissipation(walls[w].normal.xyz, s, k_h * s * sqrt(s), k_h, 1.0 / inv_i, gap, 0.0, vi,
                                            wi, zero, xi_in, h, beta_wall, mu_wall, kappa);
                f = f + o.f_i;
                m = m + o.m_i;
                f_wall = f_wall + o.f_i;
                xi_new = o.xi;
            }
            if mu_wall > 0.0 {
                whist[row * slots + slot] = vec4<real>(xi_new, 0.0);
            }
        }
    }
    // The ledger's lanes (w) are the kicks' (`ledger_step`): kept.
    dload_force_put(i, vec4<real>(f, dload_force_at(i).w));
    dload_moment_put(i, vec4<real>(m, dload_moment_at(i).w));
    dload_wall_put(i, vec4<real>(f_wall, 0.0));
}

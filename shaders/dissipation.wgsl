// Dissipative loads of MODEL §10 (twin of `DissPass::particle`, src/engine/cpu/dissipation.rs):
// per particle of a dissipating replica, the viscous binder of its intact bonds (in incidence
// order, each bond evaluated from its own ends as the CPU's bond pass does) with, where bonded
// pairs' contacts go with the bonds (`bond_contacts`), their contact dashpots and sliders (the
// sliders' history beside the incidence, `inc_xi`), then the dashpots and sliders of its other
// contacts (partners in index order, from the Verlet list or, for an overflowed list, the grid
// walk: shaders/walk.wgsl) and of its walls (in wall order), in the CPU's order, from the
// positions of this evaluation and the
// velocities the step already knows (v_{k+½}, Ω_{k+½}: right-endpoint
// forcing), with the spring–sliders of the frictional contacts, whose history ξ it reads from
// particle i's own row of `hist_*`/`whist` (its own copy in `inc_xi` for a bonded pair) and
// rewrites there (shaders/bindings.wgsl: each pair's ξ kept by both its particles). Written into `dload_*` before the particle
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
    // With them, where the bonded pairs' contacts go with the bonds (`bond_contacts`), each
    // bond's contact dashpot and slider, added to its binder's as the CPU's bond pass adds them.
    // The host's test (`gpu::batch::reads_bond_peers`) decides that `inc_peer` is real.
    let binder = any(gamma > vec4<real>(0.0));
    let dashpots = bond_contacts(r) && !walks_bonded(r) && (beta > 0.0 || mu > 0.0);
    if binder || dashpots {
        let rupture = (reps[r].flags & FLAG_RUPTURE) != 0u;
        for (var p = inc_offsets[i]; p < inc_offsets[i + 1u]; p++) {
            let e = inc_entries[p - chunk.inc_win];
            let b = e >> 1u;
            // Broken, at this evaluation too (the bond kernel ran before): its binder exerts
            // nothing, its pair's contact still may.
            var broken = false;
            if rupture {
                let bit = broken_bit(r, b);
                broken = (atomicLoad(&bond_broken[bit.x]) & bit.y) != 0u;
            }
            if broken && !dashpots {
                continue;
            }
            // The bond's ends (i, j) in its own order: this particle and its peer.
            let peer = inc_peer[p - chunk.inc_win];
            var ends = vec2<u32>(i, peer);
            if (e & 1u) != 0u {
                ends = vec2<u32>(peer, i);
            }
            let d = pair_vector(ends.x, ends.y, edge);
            let dv = vel_at(ends.x).xyz - vel_at(ends.y).xyz;
            // The ends' angular velocities where the binder or a slider reads them.
            var w_i = zero;
            var w_j = zero;
            if binder || mu > 0.0 {
                w_i = omega_at(ends.x).xyz;
                w_j = omega_at(ends.y).xyz;
            }
            var o = BondDamping(zero, zero, zero);
            if binder && !broken {
                o = binder_damping(d, dv, w_i, w_j, gamma);
            }
            if dashpots {
                // ξ of the bond's pair seen from its end i: this end's copy, rewritten in place.
                let at = p - chunk.inc_win;
                var xi_in = zero;
                if mu > 0.0 {
                    xi_in = inc_xi[at].xyz;
                }
                let c = bonded_dissipation(ends, d, dv, w_i, w_j, xi_in, h, beta, mu, kappa, reps[r].k_contact);
                o.f_i = o.f_i + c.f_i;
                o.m_i = o.m_i + c.m_i;
                o.m_j = o.m_j + c.m_j;
                if mu > 0.0 {
                    inc_xi[at] = vec4<real>(c.xi, 0.0);
                }
            }
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
        var pw = PairWalk(i, r, c, xi, ri, vi, wi, inv_i, edge, reps[r].k_contact, beta, mu, kappa, row, true,
                          ListWalk(), 0u, 0u, 0u, f, m);
        if mu > 0.0 {
            pw.own_count = hist_count[row];
        }
        let cnt = nbr_count[i];
        let base = nbr_offsets[i];
        pw.listed = cnt <= nbr_offsets[i + 1u] - base;
        var walk: GridWalk;
        if pw.listed {
            pw.list_walk = list_walk_start(i, r, base, cnt, walks_bonded(r));
        } else {
            walk = grid_walk_start(c, r, i);
        }
        // The contacts in partner order, the row rewritten in place; with a queue from the
        // first new contact that would overwrite an old one the cursor has not reached.
        let pending = pairs_in_place(&pw, &walk);
        if pending.q.j != NO_PARTNER {
            pairs_queued(&pw, &walk, pending);
        }
        f = pw.f;
        m = pw.m;
        if mu > 0.0 {
            hist_count[row] = min(pw.written, HIST_SLOTS);
            if pw.written > HIST_SLOTS {
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

/// What `dissipate` knows of particle i while it walks its contacts, and how far the walk and the
/// rewrite of its history row have come: the row's old contacts come in partner order, as the
/// walk visits them, so a cursor `own` reads them where they are while the new row is written
/// over the old one from its start (`written` entries so far).
struct PairWalk {
    i: u32,
    r: u32,
    c: vec3<i32>,
    xi: vec3<real>,
    ri: real,
    vi: vec3<real>,
    wi: vec3<real>,
    inv_i: real,
    edge: real,
    k_contact: real,
    beta: real,
    mu: real,
    kappa: real,
    row: u32,
    listed: bool,
    list_walk: ListWalk,
    own: u32,
    own_count: u32,
    written: u32,
    /// The dissipative force and moment so far (the binder's, then each contact's in order).
    f: vec3<real>,
    m: vec3<real>,
}

/// A candidate partner: its index (NO_PARTNER after the last), x_i − x_j and its radius.
struct PairPartner {
    j: u32,
    d: vec3<real>,
    rj: real,
}

/// A contact about to be evaluated: its partner, distance, overlap, inverse-mass sum and ξ.
struct PairContact {
    q: PairPartner,
    l: real,
    s: real,
    inv: real,
    xi_in: vec3<real>,
}

/// The dissipative loads (`contact_dissipation`: normal dashpot and, with `mu` > 0, the
/// spring–slider from ξ seen from end i, `xi`) of bond `ends`'s touching particles at
/// `d = x_i − x_j`, `dv = v_i − v_j`, angular velocities `w_i`, `w_j`; zero (ξ too) where they
/// do not touch. The twin of the CPU bond pass's `BondContacts::bonded_dissipation`, the same
/// operations.
fn bonded_dissipation(ends: vec2<u32>, d: vec3<real>, dv: vec3<real>, w_i: vec3<real>, w_j: vec3<real>,
                      xi: vec3<real>, h: real, beta: real, mu: real, kappa: real, k_contact: real) -> ContactLoad {
    let zero = vec3<real>(0.0);
    let none = ContactLoad(zero, zero, zero, zero);
    let ri = pos_at(ends.x).w;
    let rj = pos_at(ends.y).w;
    let reach = ri + rj;
    let inv = inertial_at(ends.x).z + inertial_at(ends.y).z;
    let l2 = dot3(d, d);
    if !(l2 < reach * reach && l2 > 0.0 && inv > 0.0) {
        return none;
    }
    let l = sqrt(l2);
    let s = reach - l;
    if s <= 0.0 {
        return none;
    }
    let k_h = hertz_constant(k_contact, reach);
    // The slider's elastic normal force and lever arms only where it acts (as the CPU's closure).
    var slider = vec3<real>(0.0);
    if mu > 0.0 {
        slider = vec3<real>(k_h * s * sqrt(s), l * ri / reach, l * rj / reach);
    }
    return contact_dissipation(d / l, s, slider.x, k_h, 1.0 / inv, slider.y, slider.z, dv, w_i, w_j, xi, h, beta, mu,
                               kappa);
}

/// The walk's next candidate partner, from the list or the grid walk.
fn pair_next(p: ptr<function, PairWalk>, walk: ptr<function, GridWalk>) -> PairPartner {
    if (*p).listed {
        // (Through a copy: naga 30's SPIR-V output fails on a pointer to a member of a pointee.)
        var lw = (*p).list_walk;
        let j = list_walk_next(&lw);
        (*p).list_walk = lw;
        if j == NO_PARTNER {
            return PairPartner(NO_PARTNER, vec3<real>(0.0), 0.0);
        }
        let xj = pos_at(j);
        return PairPartner(j, block_vector((*p).c, (*p).xi - xj.xyz, cell_at(j).xyz, (*p).edge), xj.w);
    }
    var at = grid_walk_next(walk);
    // Bonded pairs' dashpots and sliders went with their bonds (`bond_contacts`), but where
    // this walk takes them (`walks_bonded`).
    let skip = bond_contacts((*p).r) && !walks_bonded((*p).r);
    while at.x != STATUS_NONE && skip && is_bonded((*p).i, at.z) {
        at = grid_walk_next(walk);
    }
    if at.x == STATUS_NONE {
        return PairPartner(NO_PARTNER, vec3<real>(0.0), 0.0);
    }
    let xj = sorted_pos_at(at.x);
    return PairPartner(at.z, block_vector((*p).c, (*p).xi - xj.xyz, neighbour_cell((*p).c, i32(at.y)), (*p).edge),
                       xj.w);
}

/// The contact with candidate q if it is active (overlap > 0, some mass free); `s` ≤ 0 if not.
fn pair_contact(p: ptr<function, PairWalk>, q: PairPartner) -> PairContact {
    var k = PairContact(q, 0.0, 0.0, 0.0, vec3<real>(0.0));
    let rs = (*p).ri + q.rj;
    let l2 = dot3(q.d, q.d);
    k.inv = (*p).inv_i + inertial_at(q.j).z;
    if l2 < rs * rs && l2 > 0.0 && k.inv > 0.0 {
        k.l = sqrt(l2);
        k.s = rs - k.l;
    }
    return k;
}

/// Evaluates contact k (its ξ found), adds its loads and writes its new ξ at slot `written`.
fn pair_apply(p: ptr<function, PairWalk>, k: PairContact) {
    let i = (*p).i;
    let j = k.q.j;
    let ri = (*p).ri;
    let rj = k.q.rj;
    let rs = ri + rj;
    let k_h = hertz_constant((*p).k_contact, rs);
    // Both ends evaluate the pair as its lower index sees it (`lo` the lower index's side): the
    // same operations on the same values, so the same bits at both ends even where a compiler
    // fuses products into sums differently for swapped operands (with IEEE rounding the
    // function is odd under the exchange of the ends, so this is also each end's own view, as on
    // the CPU).
    let lo = i < j;
    let sign = select(real(-1.0), real(1.0), lo);
    let vi = (*p).vi;
    let wi = (*p).wi;
    let vj = vel_at(j).xyz;
    let wj = omega_at(j).xyz;
    let l = k.l;
    let s = k.s;
    let o = contact_dissipation((k.q.d * sign) / l, s, k_h * s * sqrt(s), k_h, 1.0 / k.inv,
                                l * select(rj, ri, lo) / rs, l * select(ri, rj, lo) / rs,
                                select(vj - vi, vi - vj, lo), select(wj, wi, lo), select(wi, wj, lo),
                                k.xi_in * sign, params.h, (*p).beta, (*p).mu, (*p).kappa);
    (*p).f = (*p).f + o.f_i * sign;
    (*p).m = (*p).m + select(o.m_j, o.m_i, lo);
    if (*p).mu > 0.0 {
        let w = (*p).written;
        if w < HIST_SLOTS {
            hist_key[(*p).row * HIST_SLOTS + w] = j;
            hist_xi[(*p).row * HIST_SLOTS + w] = vec4<real>(o.xi * sign, 0.0);
        }
        (*p).written = w + 1u;
    }
}

/// Whether writing the next new contact would overwrite an old one the cursor has not reached.
fn pair_displaces(p: ptr<function, PairWalk>) -> bool {
    let w = (*p).written;
    return (*p).mu > 0.0 && w < HIST_SLOTS && w >= (*p).own && w < (*p).own_count;
}

/// The contacts of the walk while no old contact is overwritten before the cursor reaches it
/// (every step in which the particle gains no contact): the cursor reads the old contacts in
/// the row. Returns the contact whose write would overwrite one (then `pairs_queued` goes on from
/// it), or a contact with q.j = NO_PARTNER at the end of the walk. No private array: a GPU keeps
/// those in thread-local memory, and WGSL zero-initialises them at every invocation.
fn pairs_in_place(p: ptr<function, PairWalk>, walk: ptr<function, GridWalk>) -> PairContact {
    loop {
        let q = pair_next(p, walk);
        if q.j == NO_PARTNER {
            break;
        }
        var k = pair_contact(p, q);
        if !(k.s > 0.0) {
            continue;
        }
        if (*p).mu > 0.0 {
            // Old contacts before j are gone; the one with j, if any, is taken.
            loop {
                if (*p).own >= (*p).own_count {
                    break;
                }
                let key = hist_key[(*p).row * HIST_SLOTS + (*p).own];
                if key > q.j {
                    break;
                }
                if key == q.j {
                    k.xi_in = hist_xi[(*p).row * HIST_SLOTS + (*p).own].xyz;
                }
                (*p).own++;
                if key == q.j {
                    break;
                }
            }
            if pair_displaces(p) {
                return k;
            }
        }
        pair_apply(p, k);
    }
    return PairContact(PairPartner(NO_PARTNER, vec3<real>(0.0), 0.0), 0.0, 0.0, 0.0, vec3<real>(0.0));
}

/// The rest of the walk from contact `first` (found, not yet applied), whose write overwrites an
/// old contact the cursor has not reached: such contacts are queued first in `kept`, a queue of
/// the old contacts at `own .. min(written, own_count)` in order (empty while own ≥ written),
/// and read from there. Only a step in which the particle gains a contact comes here.
fn pairs_queued(p: ptr<function, PairWalk>, walk: ptr<function, GridWalk>, first: PairContact) {
    var kept_key: array<u32, HIST_SLOTS>;
    var kept_xi: array<vec3<real>, HIST_SLOTS>;
    var kept_head = 0u;
    var kept_len = 0u;
    var k = first;
    loop {
        if pair_displaces(p) {
            let w = (*p).written;
            let tail = (kept_head + kept_len) % HIST_SLOTS;
            kept_key[tail] = hist_key[(*p).row * HIST_SLOTS + w];
            kept_xi[tail] = hist_xi[(*p).row * HIST_SLOTS + w].xyz;
            kept_len++;
        }
        pair_apply(p, k);
        // The next active contact and its ξ.
        loop {
            let q = pair_next(p, walk);
            if q.j == NO_PARTNER {
                return;
            }
            k = pair_contact(p, q);
            if k.s > 0.0 {
                break;
            }
        }
        if (*p).mu > 0.0 {
            loop {
                if (*p).own >= (*p).own_count {
                    break;
                }
                // Overwritten already (queued), or still in the row.
                let queued = (*p).own < (*p).written;
                var key: u32;
                if queued {
                    key = kept_key[kept_head];
                } else {
                    key = hist_key[(*p).row * HIST_SLOTS + (*p).own];
                }
                if key > k.q.j {
                    break;
                }
                if key == k.q.j {
                    if queued {
                        k.xi_in = kept_xi[kept_head];
                    } else {
                        k.xi_in = hist_xi[(*p).row * HIST_SLOTS + (*p).own].xyz;
                    }
                }
                if queued {
                    kept_head = (kept_head + 1u) % HIST_SLOTS;
                    kept_len--;
                }
                (*p).own++;
                if key == k.q.j {
                    break;
                }
            }
        }
    }
}

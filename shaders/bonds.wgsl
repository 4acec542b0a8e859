// Per-bond kernel, twin of `model::bond_terms` and of the CPU engine's per-bond pass:
// bending/torsion, axial and shear of one bond from the current state, written once per bond
// (the particle kernel gathers them); with rupture on, the measures and the rule of MODEL §6
// decide whether the bond breaks at this state.

/// Twin of `model::bond_reference`: (d̂0, L0) from d0 = x_i0 − x_j0, with L0 = sqrt(d0·d0) and
/// d̂0 = d0 / L0 component by component.
fn bond_reference(d0: vec3<real>) -> vec4<real> {
    let l0 = sqrt(dot(d0, d0));
    return vec4<real>(d0 / l0, l0);
}

/// The contact force on end i of bond `e` at `d = x_i − x_j` where its replica evaluates its
/// bonded pairs' contacts with the bonds (`bond_contacts`) and the two touch, else zero: the
/// twin of the CPU bond pass's `BondContacts::bond_contact`. (Adding a zero differs from not adding
/// only in the sign of a zero sum, which no result depends on.)
fn bond_contact_force(rep: u32, e: vec2<u32>, d: vec3<real>) -> vec3<real> {
    let reach = pos_at(e.x).w + pos_at(e.y).w;
    if !bond_contacts(rep) || dot3(d, d) >= reach * reach {
        return vec3<real>(0.0);
    }
    return contact(d, reach, reps[rep].k_contact).force;
}

@compute @workgroup_size(WG)
fn bonds(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    // Bond k of the batch; kw its element in this chunk's windows of the per-bond arrays.
    let k = chunk.b_first + linear_id(wid, nwg, lid, WG);
    let step = current_step();
    if k >= chunk.b_end {
        return;
    }
    let kw = k - chunk.bond_win;
    let e = bond_ends[kw];
    // A bond belongs to the replica of its ends.
    let rep = replica_of(e.x);
    if frozen(rep, step) {
        return;
    }
    let rupture_on = (reps[rep].flags & FLAG_RUPTURE) != 0u;
    let edge = reps[rep].cell_edge;
    let d = pair_vector(e.x, e.y, edge);
    // The contact of the bond's two particles (intact or broken), where it goes with the bond
    // (`bond_contacts`): added to the bond's force; its energy the particle kernel takes.
    let f_contact = bond_contact_force(rep, e, d);
    // A broken bond exerts nothing but that contact and has no energy (zeros, so the gather and
    // the reduction need not know about rupture).
    let zero = vec4<real>(0.0);
    let flag = broken_bit(rep, k);
    if rupture_on && (atomicLoad(&bond_broken[flag.x]) & flag.y) != 0u {
        bond_out[kw] = BondOutGpu(vec4<real>(f_contact, 0.0), zero, zero);
        return;
    }
    var q_i0 = q_ref_at(e.x);
    var q_j0 = q_ref_at(e.y);
    if (reps[rep].flags & FLAG_BOND_Q0) != 0u {
        q_i0 = bond_q0[2u * kw];
        q_j0 = bond_q0[2u * kw + 1u];
    }
    let dq_i = quat_mul(quat_at(e.x), quat_conj(q_i0));
    let dq_j = quat_mul(quat_at(e.y), quat_conj(q_j0));
    // Reference direction and length: as `Model::new` forms them from the particles' reference
    // positions (d0 = x_i0 − x_j0, L0 = |d0| as sqrt of the dot product, d̂0 = d0 / L0, the same
    // operations in the same order, so in f64 the same bits), or stored per bond.
    var r: vec4<real>;
    if (reps[rep].flags & FLAG_BOND_REF) != 0u {
        r = bond_ref[kw];
    } else {
        r = bond_reference(block_vector(ref_cell_at(e.x).xyz, ref_pos_at(e.x).xyz - ref_pos_at(e.y).xyz, ref_cell_at(e.y).xyz, edge));
    }
    let bend = bending(dq_i, dq_j, reps[rep].k_bend);
    let ax = axial(d, r.w, reps[rep].k_axial);
    let sh = shear(reps[rep].shear_variant, d, r.xyz, dq_i, dq_j, reps[rep].k_shear);
    if rupture_on {
        // The thresholds' scale: per bond with Weibull scatter, else 1 (and no array to read).
        var scale = real(1.0);
        if (reps[rep].flags & FLAG_WEIBULL) != 0u {
            scale = bond_scale[kw];
        }
        let mode = bond_breaks(reps[rep].shear_variant, d, r.w, r.xyz, dq_i, dq_j, reps[rep].rupture_inv, scale,
                               reps[rep].rupture_sum != 0u, RUPTURE_SLACK);
        if mode >= 0 {
            // Broken from this evaluation on: it exerts nothing from F_k on (MODEL §6). Its
            // energy at this state is released; the host books it (in step, then bond order),
            // the watch sums it for the energy guard of this step.
            atomicOr(&bond_broken[flag.x], flag.y);
            // No loads; the energy it releases, for the watch (`broke_now`).
            // U plus half a step of its loads' work (none at the initial evaluation).
            var h = params.h;
            if params.batch_len == 0u {
                h = 0.0;
            }
            let released = released_energy(bend.energy + ax.energy + sh.energy, ax.force + sh.f_i, bend.moment + sh.m_i,
                                            sh.m_j - bend.moment, vel_at(e.x).xyz - vel_at(e.y).xyz, omega_at(e.x).xyz,
                                            omega_at(e.y).xyz, h);
            bond_out[kw] = BondOutGpu(vec4<real>(f_contact, released), vec4<real>(vec3<real>(0.0), BROKE_NOW), zero);
            // The host sizes the records for every bond, or for what one binding holds, and
            // fails the batch with a clear error if more broke than that.
            let slot = atomicAdd(&status[STATUS_BREAKS], 1u);
            if slot < arrayLength(&break_id) {
                let mid = 0.5 * (position_from_origin(e.x, edge) + position_from_origin(e.y, edge));
                break_at[slot] = vec4<real>(mid, released);
                break_id[slot] = vec4<u32>(k, step, u32(mode), 0u);
            }
            return;
        }
    }
    bond_out[kw] = BondOutGpu(
        vec4<real>(ax.force + sh.f_i + f_contact, bend.energy),
        vec4<real>(bend.moment + sh.m_i, ax.energy),
        vec4<real>(sh.m_j - bend.moment, sh.energy),
    );
}

/// Copies the results of this bond chunk's bonds that particle chunks read from the halo
/// (entries fill_first .. fill_end of halo_fill; see src/gpu/chunks.rs). Each halo entry is
/// written by one thread, and holds exactly what bond_out holds.
@compute @workgroup_size(WG)
fn halo_copy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let t = chunk.fill_first + linear_id(wid, nwg, lid, WG);
    if t >= chunk.fill_end {
        return;
    }
    let s = halo_fill[t];
    halo[s] = bond_out[halo_src[s] - chunk.bond_win];
}

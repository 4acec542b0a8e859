// Per-bond kernel, twin of `model::bond_terms`: bending/torsion, axial and shear of one bond
// from the current state, written once per bond (the particle kernel gathers them).

@compute @workgroup_size(WG)
fn bonds(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let k = linear_id(wid, nwg, lid, WG);
    if k >= params.n_bonds || frozen(current_step()) {
        return;
    }
    let e = bond_ends[k];
    let dq_i = quat_mul(quat[e.x], quat_conj(bond_q0[2u * k]));
    let dq_j = quat_mul(quat[e.y], quat_conj(bond_q0[2u * k + 1u]));
    let d = pos[e.x].xyz - pos[e.y].xyz;
    let r = bond_ref[k];
    let bend = bending(dq_i, dq_j, params.k_bend);
    let ax = axial(d, r.w, params.k_axial);
    let sh = shear(params.shear_variant, d, r.xyz, dq_i, dq_j, params.k_shear);
    bond_out[k] = BondOutGpu(
        vec4<real>(ax.force + sh.f_i, bend.energy),
        vec4<real>(bend.moment + sh.m_i, ax.energy),
        vec4<real>(sh.m_j - bend.moment, sh.energy),
    );
}

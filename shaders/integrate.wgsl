// Opening part of a step (MODEL §2, `integrator::pre_force`): the opening kick where it is not
// already fused into the previous step's closing kick, the drift x += h v and the attitude
// update q ← q(Δα) ⊗ q. `integrate_check` runs first for rrp-exact so that nothing moves in a
// step whose condition h²|Ω_h|² < 1 fails. A particle whose offset leaves its block moves into
// the block that holds it (src/gpu/frame.rs). A particle that has moved more than half the
// Verlet skin since the last rebuild, both absolutely and relative to its replica's anchor
// (`drift_anchor`), or an overflowed neighbour list makes this step rebuild (the rule:
// src/grid.rs, `NeighbourList`); a replica that rebuilds rarely (FLAG_EARLY) also rebuilds at a
// grid step where it has moved EARLY_FRACTION of that (docs/GPU.md, "Quiet steps").

/// Kick factor of the opening kick: h for campello (full kick), ½h for maps 23/25 at the first
/// step of a batch, 0 afterwards (the previous step's particle kernel already applied it).
fn kick_pre(step: u32) -> real {
    if params.integrator == 2u {
        return params.h;
    }
    if step == 0u {
        return 0.5 * params.h;
    }
    return 0.0;
}

@compute @workgroup_size(WG)
fn integrate_check(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wid, nwg, lid, WG);
    let step = current_step();
    if i >= params.n_particles || is_fixed(i) {
        return;
    }
    // Only failures of earlier steps stop the check: one reported by another workgroup of this
    // dispatch must not, or the lowest failing particle could go unchecked.
    let r = replica_of(i);
    if held(r) || failed_before(r, step) || missed(step) {
        return;
    }
    let h = params.h;
    let wh = omega_at(i).xyz + moment_at(i).xyz * (kick_pre(step) * inertial_at(i).w);
    let s = h * h * dot3(wh, wh);
    // A non-finite s fails too, as on the CPU (tested on its bits: see finite_f32.wgsl).
    if !finite_real(s) || s >= 1.0 {
        atomicMin(&status[rslot(r, RSTATUS_EXACT_STEP)], step);
        atomicMin(&status[rslot(r, RSTATUS_EXACT_PARTICLE)], i);
    }
}

/// One thread per replica: its anchor's (first particle's) displacement since the last rebuild
/// once this step has drifted it, computed as `integrate` will compute it (twin of
/// the anchor's drift in `CpuEngine::integrate`, src/engine/cpu/integrate.rs). Any common vector would keep
/// the rule valid (|Δx_i − Δx_j| ≤ |Δx_i − d| + |Δx_j − d|); this one makes a body in rigid
/// flight rebuild only for its deformation. Read by `integrate` in its own dispatch, so no
/// thread reads a position another one is writing.
@compute @workgroup_size(WG)
fn drift_anchor(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let r = linear_id(wid, nwg, lid, WG);
    // After a missed rebuild the replica's slot keeps that step's decision for the host's finish.
    if r >= params.n_replicas || missed(current_step()) {
        return;
    }
    // This step's skin-rule verdicts for the replica start empty (`integrate` or-s them).
    atomicStore(&status[rslot(r, RSTATUS_REBUILD)], 0u);
    let a = reps[r].p_start;
    var d = vec3<real>(0.0);
    if reps[r].n_particles > 0u && !is_fixed(a) {
        var v = vel_at(a).xyz;
        let kick = kick_pre(current_step());
        if kick != 0.0 {
            v = v + force_at(a).xyz * (kick * inertial_at(a).z);
        }
        d = (pos_at(a).xyz + v * params.h) - x_ref_at(a).xyz;
        if !finite3(d) {
            // A non-finite anchor must not hide the others' displacements.
            d = vec3<real>(0.0);
        }
    }
    drift[r] = vec4<real>(d, 0.0);
}

@compute @workgroup_size(WG)
fn integrate(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wid, nwg, lid, WG);
    // While a list is too long for its capacity, the grid must be fresh every step (fallback),
    // whichever replica is frozen.
    if i == 0u && atomicLoad(&status[STATUS_OVERFLOW]) != 0u {
        atomicOr(&status[STATUS_REBUILD], REBUILD_ALL);
    }
    if i >= params.n_particles || is_fixed(i) {
        return;
    }
    let r = replica_of(i);
    if frozen(r, current_step()) {
        return;
    }
    let h = params.h;
    let kick = kick_pre(current_step());
    let inv = inertial_at(i);
    var v = vel_at(i).xyz;
    var w = omega_at(i).xyz;
    if kick != 0.0 {
        let v0 = v;
        let w0 = w;
        v = v + force_at(i).xyz * (kick * inv.z);
        w = w + moment_at(i).xyz * (kick * inv.w);
        vel_put(i, vec4<real>(v, 0.0));
        omega_put(i, vec4<real>(w, 0.0));
        if dissipates(r) {
            // The ledger's share of the opening kick (MODEL §10).
            let a = dload_force_at(i);
            let b = dload_moment_at(i);
            let ledger = ledger_step(vec2<real>(a.w, b.w), -kick_work(kick, a.xyz, b.xyz, v0, v, w0, w));
            dload_force_put(i, vec4<real>(a.xyz, ledger.x));
            dload_moment_put(i, vec4<real>(b.xyz, ledger.y));
        }
    }
    let dalpha = rotation_increment(params.integrator, h, w);
    let xr = pos_at(i);
    let x0r = x_ref_at(i);
    var x = xr.xyz + v * h;
    var x0 = x0r.xyz;
    // Into the block that holds x, at every step that leaves one (not at rebuilds, whose times
    // depend on the whole batch): so (block, offset) follows from the trajectory alone and a
    // replica runs bit for bit as alone, resumed or rolled back. Shifts by whole blocks are
    // exact in the block and, for one block, nearly so in the offset (< ½ ulp of the edge). A
    // non-finite or escaping x stays where it is, for the grid to report.
    let f = floor(x * reps[r].inv_cell);
    if BLOCKS && any(f != vec3<real>(0.0)) && finite3(x) && all(abs(f) < vec3<real>(MAX_CELL_COORD)) {
        let edge = reps[r].cell_edge;
        cell_put(i, vec4<i32>(cell_at(i).xyz + vec3<i32>(f), 0));
        x = x - f * edge;
        // The reference position follows into the same block (it only decides rebuilds).
        x0 = x0 - f * edge;
        x_ref_put(i, vec4<real>(x0, x0r.w));
    }
    pos_put(i, vec4<real>(x, xr.w));
    quat_put(i, apply_increment(quat_at(i), dalpha));
    // The two tests of the skin rule (src/grid.rs, `NeighbourList::moved`): the lists stay
    // valid while either passes for every particle, so the step rebuilds only when both have
    // failed somewhere. Non-finite positions fail both (the grid then reports them).
    let moved = x - x0;
    let moved2 = dot3(moved, moved);
    let rel = moved - drift[r].xyz;
    let rel2 = dot3(rel, rel);
    var bits = 0u;
    if !finite_real(moved2) || moved2 > reps[r].half_skin_sq {
        bits = bits | REBUILD_ABS;
    }
    if !finite_real(rel2) || rel2 > reps[r].half_skin_sq {
        bits = bits | REBUILD_REL;
    }
    // At a grid step, a replica that rebuilds rarely also tests a smaller threshold (FLAG_EARLY),
    // so that it is unlikely to need a rebuild before the next grid step.
    if (reps[r].flags & FLAG_EARLY) != 0u && replica_grid_step(r, current_step()) {
        if !finite_real(moved2) || moved2 > reps[r].early_skin_sq {
            bits = bits | REBUILD_EARLY_ABS;
        }
        if !finite_real(rel2) || rel2 > reps[r].early_skin_sq {
            bits = bits | REBUILD_EARLY_REL;
        }
    }
    if bits != 0u {
        atomicOr(&status[rslot(r, RSTATUS_REBUILD)], bits);
    }
}

/// One thread per replica, after `integrate`: whether the replica rebuilds its part of the grid
/// and its lists in this step, on its own verdicts (both tests failed somewhere in it, or, at a
/// grid step of a replica with FLAG_EARLY, both early tests) or because the whole batch must
/// (`REBUILD_ALL`: a batch's first step, an overflowed list); never a replica that is frozen,
/// failed before or failed this step's rrp-exact check. Marks it (`REBUILD_SOME` in its slot,
/// which `grid_step` reads), counts it, and raises the batch's `REBUILD_SOME` so that the grid
/// stage launches. So one moving replica of a study rebuilds alone, and each replica rebuilds at
/// the steps it would rebuild at alone. A rebuild in a step without the grid stage
/// (`grid_recorded`) stops the batch there for the host to finish (STATUS_MISS_STEP).
@compute @workgroup_size(WG)
fn rebuild_decide(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let r = linear_id(wid, nwg, lid, WG);
    if r >= params.n_replicas {
        return;
    }
    let step = current_step();
    // A miss of this step (another replica's, in this dispatch) must not stop this decision.
    if step > 0u && missed(step - 1u) {
        return;
    }
    let all = (atomicLoad(&status[STATUS_REBUILD]) & REBUILD_ALL) == REBUILD_ALL;
    let verdicts = atomicLoad(&status[rslot(r, RSTATUS_REBUILD)]);
    let own = (verdicts & REBUILD_ALL) == REBUILD_ALL || (verdicts & REBUILD_EARLY) == REBUILD_EARLY;
    if (all || own) && !held(r) && rstatus(r, RSTATUS_EXACT_STEP) == STATUS_NONE && !failed_before(r, step) {
        atomicOr(&status[rslot(r, RSTATUS_REBUILD)], REBUILD_SOME);
        atomicAdd(&status[rslot(r, RSTATUS_REBUILDS)], 1u);
        atomicOr(&status[STATUS_REBUILD], REBUILD_SOME);
        if !grid_recorded(step) {
            // No grid stage was recorded in this step: the host finishes the batch from here.
            atomicMin(&status[STATUS_MISS_STEP], step);
        }
    }
}

// The watch of every step (MODEL §9 and the energy guard; src/guard.rs and src/impact.rs are
// the host's twins): each replica's mechanical energy (kinetic + elastic), gravity's energy, the
// energy its bonds released at this step, m v·n along its first contacted wall and the total
// wall force, summed as trees segmented by replica (as reduce.wgsl sums the diagnostics, each
// replica over its own indices only, so that a replica's sums are the same in any batch), then
// taken by `watch_update`, one thread per replica: the guard's scale, deviation and trip, the
// contact steps, the peak wall force and the separation. The particle kernel leaves each
// particle's share in the free lanes of its results: pot.w (mechanical), force.w (released),
// moment.w (m v·n); the wall force is recomputed from the state, as reduce_state does, and
// E_dissipated is the particles' shares at the step, in `dload_wall.w` (MODEL §10).

/// Records of NW reals (`tree_sum`, shaders/tree.wgsl; slots W_* from the generated header).
const RQ: u32 = NW;

/// Mirrors `WatchGpu` (src/gpu/watch.rs): one replica's watch, set by the host at the start of a
/// batch from its own (`Watch`), updated at every step, read back at the end. Steps are batch
/// steps (STATUS_NONE: not in this batch).
struct WatchGpu {
    /// E + E_released at step 0, the guard's limit, the scale so far, the largest deviation so
    /// far (not reset per batch).
    e0: real,
    limit: real,
    scale: real,
    max_dev: real,
    /// E_released before the current step: the host's at the start of the batch, then added up
    /// here from what each step released.
    released: real,
    /// The largest |F_wall| so far; v_cm·n at the separation; the replica's mass.
    peak: real,
    vn_sep: real,
    mass: real,
    /// Normal of the first contacted wall (xyz); w: the deviation of a refused step.
    normal: vec4<real>,
    /// Batch steps of this batch's new largest deviation, first and last contact, peak, separation
    /// and the guard's refusal.
    max_step: u32,
    first: u32,
    last: u32,
    peak_step: u32,
    sep_step: u32,
    trip_step: u32,
    /// Contact episodes begun in this batch, and steps observed.
    episodes: u32,
    observed: u32,
}

/// Workgroups of this level (x) and the offset of its entries in `watch_table` (y).
@group(3) @binding(0) var<uniform> watch_len: vec4<u32>;
@group(3) @binding(1) var<storage, read_write> watch_in: array<real>;
@group(3) @binding(2) var<storage, read_write> watch_out: array<real>;
@group(3) @binding(3) var<storage, read> watch_table: array<vec4<u32>>;
/// Per replica: its watch, and its flags (WATCH_* bits).
@group(3) @binding(5) var<storage, read_write> watch: array<WatchGpu>;
@group(3) @binding(6) var<storage, read_write> watch_flags: array<u32>;

/// This workgroup's entry of the chunk table (zeros past the level's end).
fn watch_entry(group: u32) -> vec4<u32> {
    if group < watch_len.x {
        return watch_table[watch_len.y + group];
    }
    return vec4<u32>(0u);
}

/// Lane 0 writes the tree's sums as the record of `group`.
fn watch_record(lid: u32, group: u32) {
    tree_sum(lid);
    if lid == 0u && group < watch_len.x {
        for (var q = 0u; q < NW; q++) {
            watch_out[group * NW + q] = tree_sh[q * WG];
        }
    }
}

/// Level 0: WG·WATCH_PER_LANE particles of one replica per workgroup (entry: replica, first
/// replica-relative particle); lane l adds particles l, l + WG, … in order (reads coalesced
/// across lanes), then the lanes' sums are summed in a tree.
@compute @workgroup_size(WG)
fn watch_state(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let group = wid.y * nwg.x + wid.x;
    let entry = watch_entry(group);
    for (var q = 0u; q < NW; q++) {
        tree_sh[q * WG + lid] = 0.0;
    }
    let r = entry.x;
    if group < watch_len.x {
        // The shares the particle kernel left in the free lanes of its results (pot.w:
        // mechanical, pot.z: gravity, force.w: released, moment.w: m v·n) and the wall force.
        var mech: real = 0.0;
        var grav: real = 0.0;
        var rel: real = 0.0;
        var pn: real = 0.0;
        var diss: real = 0.0;
        var f = vec3<real>(0.0);
        for (var j = 0u; j < WATCH_PER_LANE; j++) {
            let t = entry.y + j * WG + lid;
            if t >= reps[r].n_particles {
                break;
            }
            let i = reps[r].p_start + t;
            let u = pot_at(i);
            mech = mech + u.w;
            grav = grav + u.z;
            rel = rel + force_at(i).w;
            pn = pn + moment_at(i).w;
            diss = diss + dissipated_node_at(r, i);
            f = f + wall_force_at(r, i);
        }
        tree_sh[W_MECH * WG + lid] = mech;
        tree_sh[W_GRAV * WG + lid] = grav;
        tree_sh[W_REL * WG + lid] = rel;
        tree_sh[W_PN * WG + lid] = pn;
        tree_sh[W_DISS * WG + lid] = diss;
        for (var c = 0u; c < 3u; c++) {
            tree_sh[(W_F + c) * WG + lid] = f[c];
        }
    }
    watch_record(lid, group);
}

/// Further levels: WG records of one replica per workgroup (entry: first record, count, copy),
/// as `reduce_partials`.
@compute @workgroup_size(WG)
fn watch_partials(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let group = wid.y * nwg.x + wid.x;
    let entry = watch_entry(group);
    for (var q = 0u; q < NW; q++) {
        var v: real = 0.0;
        if lid < entry.y {
            v = watch_in[(entry.x + lid) * NW + q];
        }
        tree_sh[q * WG + lid] = v;
    }
    watch_record(lid, group);
    // A replica already down to one record: its record unchanged (a sum with zeros could turn a
    // −0 into +0, which the same model alone would not).
    if lid == 0u && group < watch_len.x && entry.z != 0u {
        for (var q = 0u; q < NW; q++) {
            watch_out[group * NW + q] = watch_in[entry.x * NW + q];
        }
    }
}

/// Twin of `guard::relative_deviation`: |e − e0| / scale, 0 where they are equal.
fn relative_deviation(e: real, e0: real, scale: real) -> real {
    let diff = abs(e - e0);
    if diff == 0.0 {
        return 0.0;
    }
    return diff / scale;
}

/// One replica's step (twin of `EnergyWatch::observe` and `ImpactWatch::observe`): its record
/// (`watch_in`, the last level's output, record r) taken into its watch.
@compute @workgroup_size(WG)
fn watch_update(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let r = linear_id(wid, nwg, lid, WG);
    if r >= params.n_replicas {
        return;
    }
    let step = current_step();
    if (watch_flags[r] & WATCH_ON) == 0u || frozen(r, step) {
        return;
    }
    var w = watch[r];
    let at = r * NW;
    let mechanical = watch_in[at + W_MECH];
    let released = watch_in[at + W_REL];
    let budget = mechanical + watch_in[at + W_GRAV] + w.released + released + watch_in[at + W_DISS];
    let scale = max(w.scale, mechanical);
    let dev = relative_deviation(budget, w.e0, scale);
    // Above the limit, or NaN: the step is refused and the watch left as it was; every kernel
    // leaves the replica alone from the next step on.
    if !(dev <= w.limit) {
        w.trip_step = step;
        w.normal.w = dev;
        watch[r] = w;
        atomicMin(&status[rslot(r, RSTATUS_GUARD_STEP)], step);
        return;
    }
    w.scale = scale;
    if dev > w.max_dev {
        w.max_dev = dev;
        w.max_step = step;
    }
    w.released = w.released + released;
    w.observed = w.observed + 1u;
    var flags = watch_flags[r];
    let f = vec3<real>(watch_in[at + W_F], watch_in[at + W_F + 1u], watch_in[at + W_F + 2u]);
    let fl = length3(f);
    if fl > 0.0 {
        if (flags & WATCH_CONTACTED) == 0u {
            // The wall most aligned with the force (the last of equals, as Rust's `max_by`).
            let w0 = reps[r].wall_start;
            var best = w0;
            for (var k = w0 + 1u; k < w0 + reps[r].n_walls; k++) {
                if dot3(walls[k].normal.xyz, f) >= dot3(walls[best].normal.xyz, f) {
                    best = k;
                }
            }
            w.normal = vec4<real>(walls[best].normal.xyz, 0.0);
            w.first = step;
            flags = flags | WATCH_CONTACTED;
            atomicStore(&status[rslot(r, RSTATUS_CONTACT_WALL)], best);
        }
        if (flags & WATCH_IN_CONTACT) == 0u {
            w.episodes = w.episodes + 1u;
        }
        w.last = step;
        if fl > w.peak {
            w.peak = fl;
            w.peak_step = step;
        }
        flags = (flags | WATCH_IN_CONTACT) & ~WATCH_SEPARATED;
    } else {
        flags = flags & ~WATCH_IN_CONTACT;
        if (flags & WATCH_CONTACTED) != 0u && (flags & WATCH_SEPARATED) == 0u {
            let vn = watch_in[at + W_PN] / w.mass;
            if vn > 0.0 {
                flags = flags | WATCH_SEPARATED;
                w.sep_step = step;
                w.vn_sep = vn;
            }
        }
    }
    watch[r] = w;
    watch_flags[r] = flags;
}

// Contact grid, rebuilt on the GPU with the CPU's layout (src/grid.rs): the bucket counts
// cleared (`grid_clear`), cell and bucket of each particle (`grid_count`, which also counts bucket sizes with integer atomics),
// an exclusive prefix scan of the counts (scan.wgsl), `grid_scatter` into arrival order, and
// `grid_order`, which rewrites each bucket sorted by particle index, as (cell, index) and
// (position, radius) records that the particle kernel reads consecutively. The atomic arrival
// order never reaches the result, so the neighbour order (and every sum) is deterministic.
// `nbr_build` then fills the Verlet neighbour lists from the grid, each sorted by particle index.
// All of it runs only in steps that rebuild (`rebuilding()`): `grid_args_set` gives the other
// kernels their workgroup counts (indirect dispatch), zero in the other steps, which keep the
// lists of the last rebuild. Within a rebuild, only the replicas that `rebuild_decide` chose
// take part (their own skin rule failed, or the batch must rebuild; never a frozen or failed
// one): the same decision for every grid kernel of a step, whatever `grid_count` reports in it.
// The others keep their lists and reference positions untouched.
//
// Batches: every replica's cells are its own (its cell edge, its blocks: in f32 a particle's
// cell is its position's block `cell[i]`, see bindings.wgsl) and are hashed with the replica
// (`cell_hash_replica`); a neighbour must be in the same cell of the same replica, so replicas
// never touch even where they overlap in space.

/// Whether this step rebuilds replica r's part of the grid (`rebuild_decide`, a dispatch
/// earlier): the same answer for every grid kernel of a step.
fn grid_step(r: u32) -> bool {
    return (rstatus(r, RSTATUS_REBUILD) & REBUILD_SOME) != 0u;
}

/// Whether the grid can place particle i: a finite position (tested on its bits: a NaN need
/// not fail a comparison in WGSL) in a cell within range. With BLOCKS, the offset must be
/// inside its block (up to rounding; `integrate` leaves it outside only when the new block
/// would be out of range).
fn placeable(i: u32) -> bool {
    let x = pos_at(i).xyz;
    let f = floor(x * reps[replica_of(i)].inv_cell);
    if BLOCKS {
        return finite3(x) && all(abs(f) < vec3<real>(2.0)) && all(abs(cell_at(i).xyz) < vec3<i32>(i32(MAX_CELL_COORD)));
    }
    return finite3(x) && all(abs(f) < vec3<real>(MAX_CELL_COORD));
}

/// The cell the grid files particle i under (0 for a particle it cannot place, whose replica
/// stops at this step): with BLOCKS its block, kept current by `integrate`; without, the cell
/// of its offset from the origin.
fn grid_cell(i: u32) -> vec3<i32> {
    if !placeable(i) {
        return vec3<i32>(0);
    }
    if BLOCKS {
        return cell_at(i).xyz;
    }
    return vec3<i32>(floor(pos_at(i).xyz * reps[replica_of(i)].inv_cell));
}

/// Indirect dispatch arguments of the grid stage, (x, y, z) of dispatch k at 3k: those the host
/// planned (`grid_full`) in steps that rebuild, zeros otherwise, so that the grid kernels cost
/// no launch at all in the steps between rebuilds (src/gpu/state.rs, `GridDispatch`).
@group(2) @binding(23) var<storage, read_write> grid_args: array<u32>;
@group(2) @binding(24) var<storage, read_write> grid_full: array<u32>;

@compute @workgroup_size(WG)
fn grid_args_set(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let k = linear_id(wid, nwg, lid, WG);
    if k < arrayLength(&grid_full) {
        grid_args[k] = select(0u, grid_full[k], rebuilding());
    }
    if k == 0u && rebuilding() {
        atomicAdd(&status[STATUS_REBUILDS], 1u);
    }
}

/// `bucket_start` seen as atomic counters while counting.
@group(2) @binding(9) var<storage, read_write> bucket_count: array<atomic<u32>>;

/// Zeroes the bucket counts (table size + 1 entries) before `grid_count`.
@compute @workgroup_size(WG)
fn grid_clear(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let b = linear_id(wid, nwg, lid, WG);
    if b <= params.mask + 1u {
        atomicStore(&bucket_count[b], 0u);
    }
}

@compute @workgroup_size(WG)
fn grid_count(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wid, nwg, lid, WG);
    if i >= params.n_particles {
        return;
    }
    let r = replica_of(i);
    if !grid_step(r) {
        return;
    }
    if !placeable(i) {
        report_grid(r, current_step(), i);
    }
    let c = grid_cell(i);
    if !BLOCKS {
        // The cell is not state here: it is the grid's, for the lists and the fallback.
        cell_put(i, vec4<i32>(c, 0));
    }
    let h = cell_hash_replica(c, r, params.mask);
    hash[i] = h;
    slot[i] = atomicAdd(&bucket_count[h], 1u);
}

@compute @workgroup_size(WG)
fn grid_scatter(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wid, nwg, lid, WG);
    if i >= params.n_particles || !grid_step(replica_of(i)) {
        return;
    }
    sorted_tmp[bucket_start[hash[i]] + slot[i]] = i;
}

/// Rank of particle i in its bucket = number of bucket members with a lower index. Cost is the
/// bucket size per particle: a few for a well-sized grid (cells of 2 r_max, ≥ 2N buckets).
@compute @workgroup_size(WG)
fn grid_order(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wid, nwg, lid, WG);
    if i >= params.n_particles || !grid_step(replica_of(i)) {
        return;
    }
    let b = hash[i];
    let lo = bucket_start[b];
    let hi = bucket_start[b + 1u];
    var rank = 0u;
    for (var p = lo; p < hi; p++) {
        if sorted_tmp[p] < i {
            rank++;
        }
    }
    sorted_cell_put(lo + rank, vec4<i32>(grid_cell(i), i32(i)));
    sorted_pos_put(lo + rank, pos_at(i));
}

/// Neighbour list of particle i: every j ≠ i of the 27 cells around i's (cells of edge
/// 2 r_max + skin) closer than r_i + r_j + skin, sorted by particle index as the CPU's list
/// (`grid::NeighbourList`), so the contact sums run in the CPU's order and in an order that the
/// time of the last rebuild does not change.
@compute @workgroup_size(WG)
fn nbr_build(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    // Particle i of the batch, in this dispatch's chunk (see ChunkGpu).
    let i = chunk.p_first + linear_id(wid, nwg, lid, WG);
    if i >= chunk.p_end || !grid_step(replica_of(i)) {
        return;
    }
    let xr = pos_at(i);
    x_ref_put(i, xr);
    let c = grid_cell(i);
    // This list's slots in the chunk's window of `nbr`.
    let base = nbr_offsets[i] - chunk.nbr_win;
    let cap = nbr_offsets[i + 1u] - nbr_offsets[i];
    let r = replica_of(i);
    let skin = reps[r].skin;
    let edge = reps[r].cell_edge;
    // Bonded pairs stay out where the replica says so: their contacts go with the bonds.
    let leave_out = unlisted(r);
    var count = 0u;
    for (var k = 0; k < 27; k++) {
        let nc = neighbour_cell(c, k);
        let b = cell_hash_replica(nc, r, params.mask);
        for (var p = bucket_start[b]; p < bucket_start[b + 1u]; p++) {
            let sc = sorted_cell_at(p);
            let j = u32(sc.w);
            if j != i && all(sc.xyz == nc) && replica_of(j) == r {
                let xj = sorted_pos_at(p);
                let d = block_vector(c, xr.xyz - xj.xyz, nc, edge);
                let rc = xr.w + xj.w + skin;
                if dot3(d, d) < rc * rc && !(leave_out && is_bonded(i, j)) {
                    if count < cap {
                        nbr[base + count] = j;
                    }
                    count++;
                }
            }
        }
    }
    nbr_count[i] = count;
    // Insertion sort of the grid-ordered list: a few dozen entries, nearly sorted already
    // (particles inside a cell come in index order).
    if count <= cap {
        for (var a = 1u; a < count; a++) {
            let key = nbr[base + a];
            var b = a;
            while b > 0u && nbr[base + b - 1u] > key {
                nbr[base + b] = nbr[base + b - 1u];
                b--;
            }
            nbr[base + b] = key;
        }
    }
    if count > cap {
        atomicMax(&status[STATUS_OVERFLOW], 1u);
        atomicMax(&status[STATUS_MAX_NBR], count);
    }
}

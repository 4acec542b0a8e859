// A particle's contact partners in particle-index order, as the kernels that visit contacts
// (shaders/particle.wgsl, shaders/dissipation.wgsl) take them: from its Verlet list
// (`ListWalk`; bonded pairs the lists leave out go with their bonds, but for `dissipate` where
// it walks them, `walks_bonded`), or, where the list
// overflowed, the grid walk: its replica's members of the 27 cells around its own (bonded or
// not), as a merge of the 27 buckets (sorted by index). Each cell keeps a cursor at its next
// member and that member's index; every round takes the smallest and advances only that cell.

/// A visit of particle i's Verlet list (slots from `base`, `count` in use), with `bonded` merged
/// in index order with its bonded partners (which its replica's lists leave out, FLAG_UNLISTED;
/// `dissipate` where it walks them, `walks_bonded`): the twin of `grid::Contacts`
/// (`NeighbourList::contacts` with them, `listed` without).
/// Cursors and the next partner of each.
struct ListWalk {
    i: u32,
    base: u32,
    count: u32,
    k: u32,
    kb: u32,
    jl: u32,
    jb: u32,
}

/// The list walk of particle i of replica r, before its first partner; `bonded`: with its
/// bonded partners merged in (only where the lists leave them out).
fn list_walk_start(i: u32, r: u32, base: u32, count: u32, bonded: bool) -> ListWalk {
    var kb = inc_offsets[i + 1u];
    if bonded && unlisted(r) {
        kb = inc_offsets[i];
    }
    return ListWalk(i, base, count, 0u, kb, listed_at(base, count, 0u), bonded_at(i, kb));
}

/// The next partner of a list walk (the smaller of the two runs' next), `NO_PARTNER` after the
/// last.
fn list_walk_next(w: ptr<function, ListWalk>) -> u32 {
    if (*w).jl < (*w).jb {
        let j = (*w).jl;
        (*w).k++;
        (*w).jl = listed_at((*w).base, (*w).count, (*w).k);
        return j;
    }
    let j = (*w).jb;
    if j != NO_PARTNER {
        (*w).kb++;
        (*w).jb = bonded_at((*w).i, (*w).kb);
    }
    return j;
}

/// First position ≥ p (below e) of a bucket whose entry is in cell `nc` of replica r and is not
/// particle i (other cells and other replicas may share the bucket), or e.
fn seek_member(p0: u32, e: u32, nc: vec3<i32>, r: u32, i: u32) -> u32 {
    var p = p0;
    while p < e {
        let sc = sorted_cell_at(p);
        if u32(sc.w) != i && all(sc.xyz == nc) && replica_of(u32(sc.w)) == r {
            break;
        }
        p++;
    }
    return p;
}

/// Particle index at bucket position p, or STATUS_NONE (above every index) when p = e.
fn member_index(p: u32, e: u32) -> u32 {
    if p < e {
        return u32(sorted_cell_at(p).w);
    }
    return STATUS_NONE;
}

/// A walk in progress: the particle, its cell and replica, and each cell's cursor, bucket end
/// and next member's index.
struct GridWalk {
    c: vec3<i32>,
    r: u32,
    i: u32,
    cur: array<u32, 27>,
    end: array<u32, 27>,
    head: array<u32, 27>,
}

/// The walk of particle i of replica r in cell c, before its first member.
fn grid_walk_start(c: vec3<i32>, r: u32, i: u32) -> GridWalk {
    var w: GridWalk;
    w.c = c;
    w.r = r;
    w.i = i;
    for (var k = 0; k < 27; k++) {
        let b = cell_hash_replica(neighbour_cell(c, k), r, params.mask);
        w.end[k] = bucket_start[b + 1u];
        w.cur[k] = seek_member(bucket_start[b], w.end[k], neighbour_cell(c, k), r, i);
        w.head[k] = member_index(w.cur[k], w.end[k]);
    }
    return w;
}

/// The next member of the walk: (its bucket position, its cell k of `neighbour_cell`, its
/// particle index), or x = STATUS_NONE when the walk is over.
fn grid_walk_next(w: ptr<function, GridWalk>) -> vec3<u32> {
    var next = STATUS_NONE;
    var src = 0;
    for (var k = 0; k < 27; k++) {
        if (*w).head[k] < next {
            next = (*w).head[k];
            src = k;
        }
    }
    if next == STATUS_NONE {
        return vec3<u32>(STATUS_NONE, 0u, STATUS_NONE);
    }
    let p = (*w).cur[src];
    let nc = neighbour_cell((*w).c, src);
    (*w).cur[src] = seek_member(p + 1u, (*w).end[src], nc, (*w).r, (*w).i);
    (*w).head[src] = member_index((*w).cur[src], (*w).end[src]);
    return vec3<u32>(p, u32(src), next);
}

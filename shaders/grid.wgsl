// Contact-grid hash shared by the grid kernels and the particle kernel: identical to
// `grid::cell_hash` in src/grid.rs (wrapping u32 arithmetic), so buckets match the CPU's.
// `MAX_CELL_COORD` and `CELL_HASH_PRIMES` come from the generated header (src/grid.rs).

fn cell_hash(c: vec3<i32>, mask: u32) -> u32 {
    let h = vec3<u32>(c) * CELL_HASH_PRIMES;
    return (h.x ^ h.y ^ h.z) & mask;
}

/// Bucket of cell `c` of replica `r`: the cell hash mixed with the replica, so that the
/// replicas of a batch (which may overlap in space) mostly land in different buckets; a bucket
/// shared anyway is told apart by the replica of each member. Replica 0 hashes as `cell_hash`.
fn cell_hash_replica(c: vec3<i32>, r: u32, mask: u32) -> u32 {
    let h = vec3<u32>(c) * CELL_HASH_PRIMES;
    return (h.x ^ h.y ^ h.z ^ (r * REPLICA_HASH_PRIME)) & mask;
}

/// The k-th (k = 0..26) of the 27 cells around `c`, in the CPU's order
/// (`CellGrid::for_each_neighbour`): offsets by z, then y, then x, each from −1 to 1.
fn neighbour_cell(c: vec3<i32>, k: i32) -> vec3<i32> {
    return c + vec3<i32>(k % 3 - 1, (k / 3) % 3 - 1, k / 9 - 1);
}

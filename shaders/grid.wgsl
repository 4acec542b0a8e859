// Contact-grid hash shared by the grid kernels and the particle kernel: identical to
// `grid::cell_hash` in src/grid.rs (wrapping u32 arithmetic), so buckets match the CPU's.
// `MAX_CELL_COORD` comes from the generated header (`grid::MAX_CELL_COORD`).

fn cell_hash(c: vec3<i32>, mask: u32) -> u32 {
    return ((u32(c.x) * 73856093u) ^ (u32(c.y) * 19349663u) ^ (u32(c.z) * 83492791u)) & mask;
}

// Multi-level exclusive prefix sum of u32 counts (any length): `scan_blocks` scans blocks of
// 2·SCAN_WG values in place and writes each block's total to `scan_sums`; the host scans the
// totals the same way, level by level, then `scan_add` adds each block's offset back. Both
// run only in steps that rebuild the grid.

/// Length of `scan_data` at this level (x; other lanes unused).
@group(3) @binding(0) var<uniform> scan_len: vec4<u32>;
@group(3) @binding(1) var<storage, read_write> scan_data: array<u32>;
@group(3) @binding(2) var<storage, read_write> scan_sums: array<u32>;

var<workgroup> scan_sh: array<u32, SCAN_WG>;
/// The rebuild flag, loaded once per workgroup so that the early return stays uniform.
var<workgroup> scan_go: u32;

@compute @workgroup_size(SCAN_WG)
fn scan_blocks(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    if lid == 0u {
        scan_go = atomicLoad(&status[STATUS_REBUILD]);
    }
    if (workgroupUniformLoad(&scan_go) & REBUILD_SOME) == 0u {
        return;
    }
    let n = scan_len.x;
    let block = wid.y * nwg.x + wid.x;
    let base = block * 2u * SCAN_WG;
    let i0 = base + 2u * lid;
    var a = 0u;
    var b = 0u;
    if i0 < n {
        a = scan_data[i0];
    }
    if i0 + 1u < n {
        b = scan_data[i0 + 1u];
    }
    let own = a + b;
    scan_sh[lid] = own;
    workgroupBarrier();
    // Hillis–Steele inclusive scan of the pair sums.
    for (var off = 1u; off < SCAN_WG; off = off * 2u) {
        var v = scan_sh[lid];
        if lid >= off {
            v = v + scan_sh[lid - off];
        }
        workgroupBarrier();
        scan_sh[lid] = v;
        workgroupBarrier();
    }
    let excl = scan_sh[lid] - own;
    if i0 < n {
        scan_data[i0] = excl;
    }
    if i0 + 1u < n {
        scan_data[i0 + 1u] = excl + a;
    }
    if lid == SCAN_WG - 1u && base < n {
        scan_sums[block] = scan_sh[lid];
    }
}

@compute @workgroup_size(SCAN_WG)
fn scan_add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wid, nwg, lid, SCAN_WG);
    if i < scan_len.x && rebuilding() {
        scan_data[i] = scan_data[i] + scan_sums[i / (2u * SCAN_WG)];
    }
}

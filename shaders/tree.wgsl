// Deterministic tree sums over a workgroup, shared by the diagnostics reduction (reduce.wgsl,
// RQ = NQ reals per lane) and the watch (watch.wgsl, RQ = NW): the kernel file that composes
// this library sets `RQ`. Lane l holds its RQ values at tree_sh[q·WG + l]; after `tree_sum`,
// lane 0's slots hold the sums, always added in the same pairs whatever the schedule.

var<workgroup> tree_sh: array<real, RQ * WG>;

/// Tree sum over the workgroup of tree_sh[q·WG + lid], for every q < RQ, into tree_sh[q·WG].
fn tree_sum(lid: u32) {
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if lid < stride {
            for (var q = 0u; q < RQ; q++) {
                tree_sh[q * WG + lid] = tree_sh[q * WG + lid] + tree_sh[q * WG + lid + stride];
            }
        }
        workgroupBarrier();
    }
}

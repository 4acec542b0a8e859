//! The CPU engine's loops over items: on the calling thread or on rayon's pool, with results
//! that do not depend on which (each item written by one call, every fold in index order).

use crate::grid::PAR_MIN;
use rayon::prelude::*;

/// Whether a loop over `n` items runs on the calling thread: small loops, and every loop when
/// the pool has one thread (rayon's splitting and bookkeeping then only cost time).
#[inline]
pub(super) fn serial(n: usize) -> bool {
    n < PAR_MIN || rayon::current_num_threads() == 1
}

/// Whether the bond pass of `n_bonds` bonds runs in parallel on the current pool (and so holds
/// `BondRanges`).
pub(crate) fn parallel_bonds(n_bonds: usize) -> bool {
    !serial(n_bonds)
}

/// The lowest index in `0..n` for which `pred` holds.
pub(super) fn first_index(n: usize, pred: impl Fn(usize) -> bool + Sync + Send) -> Option<usize> {
    if serial(n) {
        (0..n).find(|&i| pred(i))
    } else {
        (0..n).into_par_iter().with_min_len(PAR_MIN / 4).find_first(|&i| pred(i))
    }
}

/// Items per block when a pass also folds per-item values in index order: each block is
/// computed in parallel into a small buffer, then folded sequentially, so the fold is the same
/// sequential sum whatever the schedule, without a per-item array.
const FOLD_BLOCK: usize = 1 << 14;

/// Runs `f(i, &mut a[i])` for every index (in parallel for large slices). With `fold`, the
/// values `f` returns are passed to it in index order. Each item is written by one call only,
/// so nothing depends on the schedule.
pub(super) fn run_pass<A: Send, E: Copy + Default + Send + Sync>(
    a: &mut [A],
    fold: Option<&mut dyn FnMut(E)>,
    f: impl Fn(usize, &mut A) -> E + Sync + Send,
) {
    let Some(fold) = fold else {
        if serial(a.len()) {
            a.iter_mut().enumerate().for_each(|(i, x)| {
                f(i, x);
            });
        } else {
            a.par_iter_mut().with_min_len(PAR_MIN / 4).enumerate().for_each(|(i, x)| {
                f(i, x);
            });
        }
        return;
    };
    let mut buf = vec![E::default(); FOLD_BLOCK.min(a.len())];
    for (blk, ca) in a.chunks_mut(FOLD_BLOCK).enumerate() {
        let base = blk * FOLD_BLOCK;
        let out = &mut buf[..ca.len()];
        if serial(ca.len()) {
            for (k, (x, o)) in ca.iter_mut().zip(out.iter_mut()).enumerate() {
                *o = f(base + k, x);
            }
        } else {
            ca.par_iter_mut().zip(out.par_iter_mut()).with_min_len(PAR_MIN / 4).enumerate().for_each(|(k, (x, o))| {
                *o = f(base + k, x);
            });
        }
        out.iter().for_each(|&e| fold(e));
    }
}

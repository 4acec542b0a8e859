//! Quiet steps: which steps of a batch record the grid stage (docs/GPU.md, "Quiet steps"), and
//! which replicas rebuild early at grid steps so that a batch can leave the grid stage out of
//! the steps between.

use crate::gpu::params::GridSteps;
use crate::gpu::params::{EARLY_INTERVAL, GRID_PERIOD};

/// Whether a replica that rebuilt `rebuilds` times in a batch of `steps` steps rebuilds rarely
/// enough to rebuild early at grid steps in the next (`params::FLAG_EARLY`): on average at most
/// once per `params::EARLY_INTERVAL` steps, or, where it rebuilt `early` in that batch, per
/// three quarters of them (under a steady motion its early rebuilds come up to a quarter
/// sooner: without the margin a replica near the bound would turn them on and off batch after
/// batch; a motion that settles between 0.75 and 1 of half a skin gains more early rebuilds
/// and may still do so, which costs speed, never results).
pub(super) fn rebuilds_rarely(rebuilds: u64, steps: u64, early: bool) -> bool {
    let interval = if early { EARLY_INTERVAL * 3 / 4 } else { EARLY_INTERVAL };
    rebuilds * interval <= steps
}

/// The grid steps of the next batch of running replicas given as (steps taken, rebuilds early
/// at its own grid steps, the steps whose absolute number is a multiple of `GRID_PERIOD`): the
/// batch leaves the grid stage out of its other steps where every running replica rebuilds
/// early and all have taken the same steps modulo the period (so that their grid steps are the
/// batch's), and `allowed`; else it records the grid stage in every step.
pub(super) fn plan(running: &[(u64, bool)], allowed: bool) -> GridSteps {
    let period = GRID_PERIOD as u64;
    let phase = running.first().map_or(0, |r| r.0 % period);
    let lockstep = running.iter().all(|r| r.0 % period == phase);
    let fast = allowed && lockstep && !running.is_empty() && running.iter().all(|r| r.1);
    GridSteps { fast, phase: phase as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_leaves_the_grid_out_only_where_every_replica_rebuilds_early_in_step() {
        // Two replicas at step 13 (phase 5): both early → fast; one not → every step.
        assert_eq!(plan(&[(13, true), (13, true)], true), GridSteps { fast: true, phase: 5 });
        assert_eq!(plan(&[(13, true), (13, false)], true), GridSteps { fast: false, phase: 5 });
        // Out of step (13 and 14): the grid in every step.
        assert_eq!(plan(&[(13, true), (14, true)], true), GridSteps { fast: false, phase: 5 });
        // Not allowed (a stuck list), or nobody running.
        assert_eq!(plan(&[(13, true)], false), GridSteps { fast: false, phase: 5 });
        assert_eq!(plan(&[], true), GridSteps { fast: false, phase: 0 });
        // Grid steps: those whose absolute number is a multiple of the period.
        let g = GridSteps { fast: true, phase: 5 };
        let recorded: Vec<u64> = (0..20).filter(|&s| g.recorded(s)).collect();
        assert_eq!(recorded, [0, 3, 11, 19]);
        assert!((0..20).all(|s| GridSteps { fast: false, phase: 5 }.recorded(s)));
        // Rarely: at most one rebuild per EARLY_INTERVAL steps, per 3/4 of it while early.
        assert!(rebuilds_rarely(1, EARLY_INTERVAL, false) && !rebuilds_rarely(2, 2 * EARLY_INTERVAL - 1, false));
        assert!(
            rebuilds_rarely(2, 3 * EARLY_INTERVAL / 2, true) && !rebuilds_rarely(2, 3 * EARLY_INTERVAL / 2 - 1, true)
        );
        assert!(rebuilds_rarely(0, 1, false));
    }
}

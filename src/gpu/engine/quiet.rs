//! Quiet steps: which steps of a batch record the grid stage (docs/GPU.md, "Quiet steps"),
//! which replicas rebuild early at grid steps so that a batch can leave the grid stage out of
//! the steps between, and what the engine counts of the steps it records.

use crate::gpu::params::GridSteps;
use crate::gpu::params::{EARLY_INTERVAL, GRID_PERIOD};

/// What an engine counts of the steps it records (`GpuEngine::quiet_figures`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuietFigures {
    /// Batch steps recorded (a batch finished after a miss counts its steps from the missed one
    /// again: they were recorded twice).
    pub steps: u64,
    /// Dispatches those steps recorded, the rest of each missed step included.
    pub dispatches: u64,
    /// Steps among them that recorded the grid stage (the rest of each missed step included).
    pub grid_steps: u64,
    /// Batches recorded with the grid stage only at grid steps in which some replica had to
    /// rebuild elsewhere, so that the host finished them from that step with the grid stage in
    /// every step (`shader::STATUS_MISS_STEP`).
    pub misses: u64,
}

/// Whether a replica that rebuilt `rebuilds` times in a batch of `steps` steps rebuilds rarely
/// enough to rebuild early at grid steps in the next (`params::FLAG_EARLY`): on average at most
/// once per `params::EARLY_INTERVAL` steps.
pub(super) fn rebuilds_rarely(rebuilds: u64, steps: u64) -> bool {
    rebuilds * EARLY_INTERVAL <= steps
}

/// The grid steps of the next batch of running replicas given as (steps taken, rebuilds
/// rarely), and whether each of them rebuilds early at grid steps. Only where every running
/// replica has taken the same steps modulo `GRID_PERIOD` (the grid steps are the batch's steps
/// whose absolute number is a multiple of it, so a replica's early rebuilds fall where they
/// would fall were it alone), and only with `allowed`: else no replica rebuilds early and the
/// grid stage is recorded in every step. The batch leaves it out of the other steps where every
/// running replica rebuilds early.
pub(super) fn plan(running: &[(u64, bool)], allowed: bool) -> (GridSteps, bool) {
    let period = GRID_PERIOD as u64;
    let phase = running.first().map_or(0, |r| r.0 % period);
    let lockstep = running.iter().all(|r| r.0 % period == phase);
    let early = allowed && lockstep;
    let fast = early && !running.is_empty() && running.iter().all(|r| r.1);
    (GridSteps { fast, phase: phase as u32 }, early)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_leaves_the_grid_out_only_where_every_replica_rebuilds_rarely_in_step() {
        // Two replicas at step 13 (phase 5): both rare → fast; one frequent → every step.
        assert_eq!(plan(&[(13, true), (13, true)], true), (GridSteps { fast: true, phase: 5 }, true));
        assert_eq!(plan(&[(13, true), (13, false)], true), (GridSteps { fast: false, phase: 5 }, true));
        // Out of step (13 and 14): nobody rebuilds early, the grid in every step.
        assert_eq!(plan(&[(13, true), (14, true)], true), (GridSteps { fast: false, phase: 5 }, false));
        // Not allowed (`GpuOptions::grid_every_step`, a stuck list), or nobody running.
        assert_eq!(plan(&[(13, true)], false), (GridSteps { fast: false, phase: 5 }, false));
        assert_eq!(plan(&[], true), (GridSteps { fast: false, phase: 0 }, true));
        // Grid steps: those whose absolute number is a multiple of the period.
        let g = GridSteps { fast: true, phase: 5 };
        let recorded: Vec<u64> = (0..20).filter(|&s| g.recorded(s)).collect();
        assert_eq!(recorded, [0, 3, 11, 19]);
        assert!((0..20).all(|s| GridSteps { fast: false, phase: 5 }.recorded(s)));
        // Rarely: at most one rebuild per EARLY_INTERVAL steps.
        assert!(rebuilds_rarely(1, EARLY_INTERVAL) && !rebuilds_rarely(2, 2 * EARLY_INTERVAL - 1));
        assert!(rebuilds_rarely(0, 1));
    }
}

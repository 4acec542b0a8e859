//! `rrpdem resume`: continue a run from its checkpoint.

use super::run::finish_run;
use super::{RunControl, checkpoint_every, install_interrupt_handler};
use anyhow::Result;
use rrpdem::output::OutputDir;
use rrpdem::run::{self, RunOptions};
use rrpdem::scenario::Scenario;
use std::io::IsTerminal;
use std::path::Path;

pub(super) fn cmd_resume(dir_path: &Path, t_end: Option<f64>, check: Option<&Path>, ctl: &RunControl) -> Result<()> {
    let dir = OutputDir::reopen(dir_path)?;
    let check = check.map(Scenario::load).transpose()?;
    install_interrupt_handler()?;
    let opts = RunOptions {
        progress: std::io::stderr().is_terminal(),
        checkpoint_every: checkpoint_every(ctl)?,
        stop_at: None,
        vtk: ctl.vtk.options()?,
        bars: None,
    };
    let result = run::resume(&dir, t_end, check.as_ref(), opts, |what| eprintln!("rrpdem: {what}"));
    drop(dir);
    finish_run(result, dir_path, ctl.plots)
}

//! `rrpdem generate`: a scenario's resolved geometry written out as CSV, with its report.

use anyhow::Result;
use rrpdem::scenario::Scenario;
use std::path::Path;

pub(super) fn cmd_generate(path: &Path, out: &Path) -> Result<()> {
    let scenario = Scenario::load(path)?;
    let geometry = scenario.build_geometry()?;
    println!("{}", rrpdem::generate::report(&scenario, &geometry));
    let files = rrpdem::generate::write(&scenario, &geometry, out)?;
    println!("wrote           {}, {}, {}", files.particles.display(), files.bonds.display(), files.scenario.display());
    Ok(())
}

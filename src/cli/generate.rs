//! `rrpdem generate`: a scenario's resolved geometry written out as CSV, with its report.

use anyhow::Result;
use rrpdem::generate::{self, EXACT_MAX_PARTICLES};
use rrpdem::scenario::Scenario;
use std::path::Path;

pub(super) fn cmd_generate(path: &Path, out: &Path, overwrite: bool) -> Result<()> {
    let scenario = Scenario::load(path)?;
    // Refused up front: a large model takes minutes to build.
    generate::check_targets(out, overwrite)?;
    let size = scenario.size_estimate()?;
    if size.particles > EXACT_MAX_PARTICLES {
        eprintln!(
            "rrpdem: building {:.3e} particles and {}{:.3e} bonds (about {:.2} GB while it is built: the model and \
             its bond list)",
            size.particles,
            if size.exact { "" } else { "at most " },
            size.bonds,
            size.model_bytes() / 1e9
        );
    }
    let geometry = scenario.build_geometry()?;
    outln!("{}", generate::report(&scenario, &geometry));
    let files = generate::write_files(&scenario, &geometry, out, overwrite)?;
    outln!("wrote           {}, {}, {}", files.particles.display(), files.bonds.display(), files.scenario.display());
    Ok(())
}

//! `rrpdem plot`: figures of a run's, a convergence study's or a study's outputs.

use anyhow::Result;
use rrpdem::study;
use std::path::{Path, PathBuf};

pub(super) fn cmd_plot(dir: &Path, out: Option<PathBuf>) -> Result<()> {
    let out = out.unwrap_or_else(|| dir.to_owned());
    if dir.join(study::STUDY_FILE).is_file() && dir.join("study.csv").is_file() {
        let s = study::read_resolved(dir)?;
        let pngs = std::iter::once(study::plot(&s, dir)?).chain(study::plot_fragments(&s, dir)?);
        for png in pngs {
            let dest = out.join(png.file_name().expect("a file"));
            if dest != png {
                std::fs::create_dir_all(&out)?;
                std::fs::rename(&png, &dest)?;
            }
            outln!("wrote {}", dest.display());
        }
        return Ok(());
    }
    for file in rrpdem::plot::plot_dir(dir, &out)? {
        outln!("wrote {}", file.display());
    }
    Ok(())
}

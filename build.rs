//! Build script: records the commit the binary is built from (`git describe --always --dirty`)
//! as `RRPDEM_COMMIT`, for `rrpdem bench`'s reports; "unknown" where git or the repository is
//! absent (a packaged source).

use std::process::Command;

fn main() {
    // Rerun when HEAD moves, a branch or the index changes, or a source changes (which may make
    // the tree dirty).
    for p in [".git/HEAD", ".git/refs", ".git/index", "src", "shaders", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={p}");
    }
    let commit = Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=RRPDEM_COMMIT={commit}");
}

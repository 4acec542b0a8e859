//! The `rrpdem` command line: run a scenario or a study, resume, generate geometry, converge,
//! compare engines, benchmark, plot.

mod cli;

/// The error and its causes, each cause added only where the text so far does not already say
/// it: the library's errors name their source in their own message (`{path}: cannot write:
/// {source}`), which `{:#}` would repeat.
fn describe(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        if !text.contains(&c) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&c);
        }
    }
    text
}

fn main() {
    // Mesa's device-select Vulkan layer prints a harmless XDG_RUNTIME_DIR complaint per instance
    // on headless machines; the engine enumerates adapters itself, so the layer is not needed.
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        // SAFETY: set before any other thread exists (first statement of main).
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
    if let Err(e) = cli::real_main() {
        eprintln!("error: {}", describe(&e));
        let interrupted = e
            .downcast_ref::<rrpdem::run::RunError>()
            .is_some_and(|r| matches!(r, rrpdem::run::RunError::Interrupted { .. }));
        // 130 = 128 + SIGINT, what shells report for a program stopped by Ctrl-C.
        std::process::exit(if interrupted { 130 } else { 1 });
    }
}

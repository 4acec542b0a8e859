//! The `rrpdem` command line: run a scenario or a study, resume, generate geometry, converge,
//! compare engines, benchmark, plot.

mod cli;

fn main() {
    // Mesa's device-select Vulkan layer prints a harmless XDG_RUNTIME_DIR complaint per instance
    // on headless machines; the engine enumerates adapters itself, so the layer is not needed.
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        // SAFETY: set before any other thread exists (first statement of main).
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
    if let Err(e) = cli::real_main() {
        eprintln!("error: {e:#}");
        let interrupted = e
            .downcast_ref::<rrpdem::run::RunError>()
            .is_some_and(|r| matches!(r, rrpdem::run::RunError::Interrupted { .. }));
        // 130 = 128 + SIGINT, what shells report for a program stopped by Ctrl-C.
        std::process::exit(if interrupted { 130 } else { 1 });
    }
}

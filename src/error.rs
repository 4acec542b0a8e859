//! Typed errors of the library (the CLI wraps them with `anyhow`).

use std::path::PathBuf;
use thiserror::Error;

/// A scenario file that cannot be read, parsed or validated. Always names the file and, where
/// there is one, the field (a JSON path such as `bodies[0].bonds[3]`) or the CSV line.
#[derive(Debug, Error)]
pub enum ScenarioError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: field `{field}`: {message}")]
    Invalid { path: PathBuf, field: String, message: String },
    #[error("{path}:{line}: {message}")]
    Csv { path: PathBuf, line: usize, message: String },
}

/// A failure while stepping or reading an engine.
#[derive(Debug, Error)]
pub enum EngineError {
    #[error(
        "rrp-exact cannot take step {step} (t = {}): particle {particle} has h²|Ω_h|² = {value} ≥ 1; \
         reduce the time step or use rrp-newmark",
        display_time(*t)
    )]
    RrpExactCondition { particle: usize, step: u64, t: f64, value: f64 },
    /// The implicit step of `em`/`sm` (MODEL §13) did not converge: nothing of the step was
    /// taken (the state is that of step `step`).
    #[error(
        "{integrator} cannot take step {step} (t = {}): its {solver} solve did not converge in {iterations} \
         iterations (last correction {correction:.3e} of the positions' scale, tolerance {tolerance:.0e}); reduce the \
         time step",
        display_time(*t)
    )]
    ImplicitSolve {
        integrator: crate::integrator::Integrator,
        solver: &'static str,
        step: u64,
        t: f64,
        iterations: u32,
        correction: f64,
        tolerance: f64,
    },
    /// `lgvi`'s rotation update (MODEL §12) found no root for a body: the state is that of step
    /// `step`. `body` is the engine's body (`what` says which clump or particle it is).
    #[error(
        "lgvi cannot take step {step} (t = {}): the rotation update of {what} has no root ({detail}); its spin is \
         too fast for the step (for a sphere the root exists only while h|Ω| < 1): reduce the time step",
        display_time(*t)
    )]
    RigidSolve { what: String, step: u64, t: f64, detail: String },
    #[error(
        "non-finite state at step {step} (t = {}): particle {particle} has {what}; the time step is probably unstable",
        display_time(*t)
    )]
    NonFinite { particle: usize, step: u64, t: f64, what: String },
    #[error("particle {particle} left the contact grid's range at step {step} (position {position}); is it escaping?")]
    OutOfRange { particle: usize, step: u64, position: String },
    #[error("time step {dt} exceeds the stability estimate {h_max:.3e} ({reason}); pass --force to run anyway")]
    Unstable { dt: f64, h_max: f64, reason: String },
    #[error(
        "energy guard: at step {step} (t = {}) the energy error |E + E_released + E_dissipated - E0| is {error:.3e} of E_scale (the \
         run's largest kinetic + elastic energy so far), above the limit {limit:.3e}{}; the time step is probably too \
         large for the speeds or overlaps reached (raise the limit with --max-energy-error if this is expected)",
        display_time(*t),
        match particle {
            Some(p) => format!(
                "; for reference, at the last good step the largest force on any particle was {force:.3e} (particle \
                 {p}: where a blow-up usually starts when that force is large; a small one means the error grew \
                 without a large force)"
            ),
            None => String::new(),
        }
    )]
    EnergyGuard { step: u64, t: f64, error: f64, limit: f64, particle: Option<usize>, force: f64 },
    /// A failure of the GPU itself (device lost, out of memory, ...), kept typed so that a
    /// caller can tell them apart.
    #[error("GPU: {0}")]
    Gpu(crate::gpu::GpuError),
    /// A failure after which the engine could not return to the last checked state either:
    /// what went wrong first, then what the return met.
    #[error("{error}; returning to the last good state failed: {rollback}")]
    NoRollback { error: Box<EngineError>, rollback: Box<EngineError> },
    #[error("{0}")]
    Unsupported(String),
}

/// A time for messages: `t` rounded to 13 significant digits, so that a step's time `k·dt`
/// reads `1.89`, not `1.8900000000000001` (files keep every digit).
pub fn display_time(t: f64) -> String {
    let rounded: f64 = format!("{t:.12e}").parse().unwrap_or(t);
    format!("{rounded}")
}

#[cfg(test)]
mod tests {
    use super::display_time;

    #[test]
    fn display_time_drops_the_rounding_noise_of_a_steps_time() {
        assert_eq!(1.8900000000000001f64.to_string(), "1.8900000000000001");
        assert_eq!(display_time(1.8900000000000001), "1.89");
        assert_eq!(display_time(2170.0 * 1e-3), "2.17");
        assert_eq!(display_time(0.0005), "0.0005");
        assert_eq!(display_time(123456.789), "123456.789");
        // Digits that are the time's own stay (13 significant).
        assert_eq!(display_time(1.234567890123), "1.234567890123");
        assert_eq!(display_time(f64::NAN), "NaN");
    }
}

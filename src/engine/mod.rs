//! The engine interface shared by the CPU reference and the GPU engine, so that tests, the
//! run driver and `compare` are written once.

pub mod batch;
pub mod cpu;
mod reordered;
mod scatter;
pub(crate) use scatter::stored_ends;

use crate::diagnostics::Diagnostics;
use crate::error::EngineError;
use crate::integrator::Kinematics;
use serde::{Deserialize, Serialize};

pub use batch::{BatchEngine, Separate, Single};
pub use cpu::CpuEngine;
pub use reordered::Reordered;

/// What the steps an engine recorded for a device cost (the GPU engine; docs/GPU.md, "Quiet
/// steps"), counted since the engine was built: `Engine::recorded_figures`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordedSteps {
    /// Batch steps recorded (a batch finished after a missed rebuild counts its steps from the
    /// missed one on again: they were recorded twice).
    pub steps: u64,
    /// Dispatches those steps recorded, the rest of each missed step included.
    pub dispatches: u64,
    /// Steps among them that recorded the grid stage.
    pub grid_steps: u64,
    /// Batches that left the grid stage out of quiet steps in which some replica had to rebuild
    /// between grid steps, so that they were finished from that step with it in every step.
    pub misses: u64,
}

impl RecordedSteps {
    /// Each count of `self` less that of `earlier` (the same engine's figures before).
    pub fn since(self, earlier: RecordedSteps) -> RecordedSteps {
        RecordedSteps {
            steps: self.steps - earlier.steps,
            dispatches: self.dispatches - earlier.dispatches,
            grid_steps: self.grid_steps - earlier.grid_steps,
            misses: self.misses - earlier.misses,
        }
    }

    /// Each count of `self` plus that of `more` (a renumbered engine goes on counting).
    pub fn plus(self, more: RecordedSteps) -> RecordedSteps {
        RecordedSteps {
            steps: self.steps + more.steps,
            dispatches: self.dispatches + more.dispatches,
            grid_steps: self.grid_steps + more.grid_steps,
            misses: self.misses + more.misses,
        }
    }
}

/// Which engine runs a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// A hardware GPU when there is one, otherwise the CPU engine.
    #[default]
    Auto,
    Cpu,
    /// Any GPU adapter, software ones included.
    Gpu,
}

/// Floating-point precision an engine computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    F32,
    #[default]
    F64,
}

impl Precision {
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        }
    }
}

/// What ran: backend, device, precision (recorded in `summary.json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EngineInfo {
    pub backend: String,
    pub device: String,
    pub precision: Precision,
}

/// An engine's own state at a step, enough for the same kind of engine to continue
/// bit-identically (`Engine::save_state` / `Engine::load_state`; stored in checkpoints).
#[derive(Clone, Debug, PartialEq)]
pub struct EngineState {
    /// The kind of engine that wrote it (`Engine::state_kind`); another kind refuses it.
    pub kind: String,
    /// Steps taken when it was saved.
    pub step: u64,
    /// Engine-specific bytes (little-endian), e.g. the raw particle arrays.
    pub data: Vec<u8>,
}

/// A rigid clump's state (MODEL §12): centre, velocity, attitude (unit quaternion) and spatial
/// angular velocity Ω. Its spheres' states follow from it (`Clump::place`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClumpState {
    pub x: glam::DVec3,
    pub v: glam::DVec3,
    pub q: glam::DQuat,
    pub w: glam::DVec3,
}

/// What an engine watches at every step of a run (`Engine::set_watch`): the energy guard
/// (`crate::guard`) and the impact measures (`crate::impact`), as they stand at the current
/// step. Kept in checkpoints with the run's progress.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Watch {
    pub energy: crate::guard::EnergyWatch,
    pub impact: crate::impact::ImpactWatch,
}

impl Watch {
    /// The watch of a run starting at `first`, its guard tripping above `limit`.
    pub fn new(first: &Diagnostics, limit: f64, walls: &[crate::interactions::Wall]) -> Watch {
        Watch {
            energy: crate::guard::EnergyWatch::new(first, limit),
            impact: crate::impact::ImpactWatch::new(first, walls),
        }
    }
}

/// A time-stepping engine for one model.
pub trait Engine {
    fn info(&self) -> EngineInfo;
    fn n_particles(&self) -> usize;
    /// Steps taken so far.
    fn steps_done(&self) -> u64;
    /// Advances `steps` steps. On error the state is that of the last completed step where the
    /// engine can tell (the `rrp-exact` condition is checked before anything moves).
    fn advance(&mut self, steps: u64) -> Result<(), EngineError>;
    /// Energy components and momenta at the current step.
    fn diagnostics(&mut self) -> Result<Diagnostics, EngineError>;
    /// Full particle state at the current step, in f64.
    fn snapshot(&mut self) -> Result<Vec<Kinematics>, EngineError>;
    /// Every clump's state at the current step (MODEL §12), in the model's clump order; empty
    /// where the model has none.
    fn clumps(&mut self) -> Result<Vec<ClumpState>, EngineError> {
        Ok(Vec::new())
    }
    /// With friction (MODEL §10): each particle's largest tangential displacement |ξ| over its
    /// frictional contacts (spheres and walls) after the last force evaluation (length units;
    /// 0 without one), the spring–slider's stretch that VTK frames show. `None` where the
    /// model has no friction.
    fn tangential_displacement(&mut self) -> Result<Option<Vec<f64>>, EngineError> {
        Ok(None)
    }
    /// What `save_state` calls this engine's state (backend and precision, e.g. `cpu-f64`).
    fn state_kind(&self) -> String;
    /// The engine's state at the current step, raw, so that `load_state` on an engine of the
    /// same kind built from the same model continues bit-identically.
    fn save_state(&mut self) -> Result<EngineState, EngineError>;
    /// Replaces the current state by a saved one (same kind, same model) and re-evaluates the
    /// forces and diagnostics of that state.
    fn load_state(&mut self, state: &EngineState) -> Result<(), EngineError>;
    /// Returns to the state at the start of the last `advance` call: after a failure or a guard
    /// trip, this is the last state the run driver checked.
    fn rollback(&mut self) -> Result<(), EngineError>;
    /// The particle with the largest |F| at the current state and that |F| (`None` if there
    /// are no particles). For error reports.
    fn largest_force(&mut self) -> Result<Option<(usize, f64)>, EngineError>;
    /// Bonds broken since the last call, by step and then bond index.
    fn take_breaks(&mut self) -> Vec<crate::interactions::BreakEvent>;
    /// Hands the engine its run's watch as it stands at the current step. An engine that
    /// watches its own steps returns `true` and from then on updates it at every step it takes;
    /// a step that the energy guard refuses ends `advance` with `EngineError::EnergyGuard` and
    /// the engine at the step before it (where `rollback` then returns). One that returns
    /// `false` leaves the watching to the run driver, at the steps it stops at.
    fn set_watch(&mut self, watch: Watch) -> bool {
        let _ = watch;
        false
    }
    /// The watch as it stands at the current step (`None` where the engine does not watch).
    fn watch(&self) -> Option<&Watch> {
        None
    }
    /// Steps between the run driver's stops where nothing else asks for one (the energy and
    /// momenta are read there, and an interrupt is noticed): each stop costs the GPU a host
    /// wait, the CPU a sum over the particles and a copy of the state for `rollback`.
    fn guard_interval(&self) -> u64;
    /// Steps that rebuilt the contact lists so far, and the lists' entries now (each pair
    /// counted from both ends), where the engine keeps lists: the cost figures of the contact
    /// search that `rrpdem bench` reports and any machine reproduces.
    fn list_figures(&mut self) -> Option<(u64, u64)> {
        None
    }
    /// What the steps an engine recorded for a device cost, where it records them (the GPU
    /// engine).
    fn recorded_figures(&self) -> Option<RecordedSteps> {
        None
    }
    /// Things a user should know about how the run went that are not errors (e.g. a slow path
    /// the engine had to keep taking); `summary.json` lists them and the CLI prints them.
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
    /// Steps between the run driver's checks of the particle order (`crate::order`: each check
    /// reads the positions back and sorts them on the host, so an engine that steps fast checks
    /// seldom), or `None` where the engine cannot be renumbered (`renumber`).
    fn order_check_interval(&self) -> Option<u64> {
        None
    }
    /// Renumbers the engine's particles and bonds, keeping its state: its new particle k is its
    /// particle `perm.particles[k]`, its new bond k its bond `perm.bonds[k]`, and `model` is its
    /// model so renumbered (built by `Order::apply`). Afterwards it continues bit for bit as an
    /// engine built from `model` with the renumbered state loaded would (what a resume from a
    /// checkpoint written now builds). Breaks not yet taken are dropped (take them first); the
    /// rollback point becomes the current state. On an error the engine is as it was.
    fn renumber(&mut self, model: &crate::model::Model, perm: &crate::order::Order) -> Result<(), EngineError> {
        let _ = (model, perm);
        Err(EngineError::Unsupported("this engine cannot renumber its particles".into()))
    }
}

/// The error for a saved state of another kind.
pub fn wrong_state_kind(have: &str, want: &str) -> EngineError {
    EngineError::Unsupported(format!(
        "the saved state was written by the {have} engine; this is the {want} engine (resume with the same backend and \
         precision)"
    ))
}

/// Creates the engine a run asked for.
///
/// `cpu`: the f64 reference (asking it for f32 is an error). `gpu`: any Vulkan/Metal/DX12
/// adapter, software ones included, f32 unless `f64` is asked for. `auto`: a hardware GPU when
/// there is one, otherwise the CPU engine. `Send`, so that a caller may step it on a thread of
/// its own (the Python bindings step it while Python's interpreter lock is released).
pub fn create(
    model: &crate::model::Model,
    integrator: crate::integrator::Integrator,
    dt: f64,
    backend: Backend,
    precision: Option<Precision>,
) -> Result<Box<dyn Engine + Send>, EngineError> {
    use crate::gpu::{AdapterChoice, GpuEngine, hardware_adapter_available};
    let gpu = |choice| -> Result<Box<dyn Engine + Send>, EngineError> {
        Ok(Box::new(GpuEngine::new(model, integrator, dt, precision.unwrap_or(Precision::F32), choice)?))
    };
    match backend {
        Backend::Cpu => match precision {
            Some(Precision::F32) => Err(EngineError::Unsupported(
                "precision f32 is only offered by the GPU engine; the CPU engine computes in f64".into(),
            )),
            _ => Ok(Box::new(CpuEngine::new(model, integrator, dt)?)),
        },
        Backend::Gpu => gpu(AdapterChoice::Any),
        // `em`, `sm` (MODEL §13), `lgvi`, clumps and mutual gravitation (§12) run on the CPU
        // engine only.
        Backend::Auto
            if !integrator.cpu_only() && model.cpu_only_feature().is_none() && hardware_adapter_available() =>
        {
            gpu(AdapterChoice::HardwareOnly)
        }
        Backend::Auto => Ok(Box::new(CpuEngine::new(model, integrator, dt)?)),
    }
}

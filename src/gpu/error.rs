//! Errors of the GPU engine: each says what is missing and what to do about it.

use crate::error::EngineError;

/// Package hint repeated in the messages about missing adapters.
pub const INSTALL_HINT: &str =
    "install mesa-vulkan-drivers libvulkan1 for software Vulkan (lavapipe), or a GPU driver with Vulkan, Metal or DX12";

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(
        "no Vulkan, Metal or DX12 adapter found{gl}; {INSTALL_HINT}. (OpenGL adapters are not used: they lack f64 \
         and the compute features this engine relies on.)",
        gl = if *gl_only { " (only an OpenGL adapter is present)" } else { "" }
    )]
    NoAdapter { gl_only: bool },
    #[error(
        "no hardware GPU adapter found (only the software adapter `{software}`); use the GPU backend explicitly to \
         accept it, or the CPU engine"
    )]
    NoHardwareAdapter { software: String },
    #[error(
        "adapter `{adapter}` lacks SHADER_F64, so it cannot run precision f64; use precision f32, or an adapter with \
         f64 support (lavapipe from mesa-vulkan-drivers has it)"
    )]
    NoF64 { adapter: String },
    #[error("adapter `{adapter}` offers {have} storage buffers per shader stage; the engine needs {need}")]
    TooFewStorageBuffers { adapter: String, have: u32, need: u32 },
    /// A buffer exceeds the adapter's binding limit. `what`/`need` name the tightest buffer, the
    /// one that bounds `max_particles`.
    #[error(
        "{what} needs {need} bytes but adapter `{adapter}` allows {have} per buffer binding; at most {max_particles} \
         particles (with this many bonds per particle) fit"
    )]
    TooLarge { adapter: String, what: &'static str, need: u64, have: u64, max_particles: u64 },
    /// More neighbour-list slots or incidence entries than a u32 index reaches.
    #[error(
        "the {what} of this model number {need}, beyond the 4 294 967 295 a u32 index reaches; at most \
         {max_particles} particles (with this many bonds per particle and list slots) fit one engine"
    )]
    TooManyIndices { what: &'static str, need: u64, max_particles: u64 },
    /// The arrays bound in parts (`gpu::chunks`) cannot be split so that particle `particle`'s
    /// own part fits one binding.
    #[error(
        "particle {particle}'s bonds span, or its neighbour list holds, more than one storage binding of {max_binding} \
         bytes allows (its bonds join particles far apart in index order, or the binding limit is tiny); number the \
         particles so that bonded ones are close in index, or use an adapter with larger bindings"
    )]
    ChunkTooLarge { particle: usize, max_binding: u64 },
    /// Damping (MODEL §10) on the GPU reads every partner's data from one binding of each
    /// per-particle array: a model whose per-particle arrays are split in two parts runs it on
    /// the CPU engine. (Per-bond arrays, incidence and neighbour lists in chunks are fine.)
    #[error(
        "damping (MODEL §10) on the GPU needs the model's per-particle arrays in one storage binding each, and \
         {what} does not fit ({particles} particles, bindings of {max_binding} bytes): run it with backend `cpu`, or \
         on an adapter with larger bindings"
    )]
    DissipationTooLarge { what: &'static str, particles: u64, max_binding: u64 },
    /// Device memory ran out (or the engine's `memory_budget` would be exceeded) while the state
    /// was being allocated.
    #[error(
        "out of GPU memory allocating {what} ({bytes} bytes) after {allocated} of the {total} bytes this model needs \
         ({message}); about {max_particles} particles (with this many bonds per particle) fit in what was available"
    )]
    OutOfMemory { what: &'static str, bytes: u64, allocated: u64, total: u64, max_particles: u64, message: String },
    /// The device was lost (driver reset, GPU removed, or destroyed); nothing on it can be used
    /// any more. Rebuild the engine (from a saved state) on a working device.
    #[error("the GPU device `{adapter}` was lost ({reason}); the run cannot continue on it")]
    DeviceLost { adapter: String, reason: String },
    #[error("cannot open a device on adapter `{adapter}`: {message}")]
    RequestDevice { adapter: String, message: String },
    #[error(transparent)]
    Shader(#[from] ShaderError),
    #[error("wgpu reported: {0}")]
    Wgpu(String),
    #[error("reading results back from the GPU failed: {0}")]
    Readback(String),
    /// The initial state itself is unusable (non-finite, out of the grid's range), found by the
    /// first force evaluation, as `CpuEngine::new` reports it.
    #[error(transparent)]
    InitialState(Box<EngineError>),
    /// `GpuEngine::new_batch` was given no model.
    #[error("a GPU batch needs at least one model (replica); none was given")]
    EmptyBatch,
}

impl From<GpuError> for EngineError {
    fn from(e: GpuError) -> Self {
        match e {
            GpuError::InitialState(inner) => *inner,
            other => EngineError::Gpu(other),
        }
    }
}

/// Errors found by naga in a composed module.
#[derive(Debug, thiserror::Error)]
pub enum ShaderError {
    #[error("shaders/{file}.wgsl ({precision}): WGSL parse error: {message}")]
    Parse { file: &'static str, precision: &'static str, message: String },
    #[error("shaders/{file}.wgsl ({precision}): validation error: {message}")]
    Invalid { file: &'static str, precision: &'static str, message: String },
    #[error("shaders/{file}.wgsl: entry point `{entry}` not found")]
    MissingEntry { file: &'static str, entry: &'static str },
}

//! GPU engine (wgpu compute, issue 3): the same model, integrators and deterministic sums as the
//! CPU reference, in f32 or f64, on any Vulkan, Metal or DX12 adapter (lavapipe included).
//!
//! Layout: [`shader`] composes and validates the WGSL in `shaders/`, [`params`] mirrors its
//! uniform struct, [`context`] picks the adapter, [`pipeline`] holds the compiled kernels,
//! [`state`] the buffers and the recording of steps, [`engine`] the `Engine` implementation.

pub mod context;
pub mod engine;
pub mod error;
pub mod params;
pub mod pipeline;
pub mod shader;
pub mod state;

pub use context::{AdapterChoice, AdapterReport, hardware_adapter_available, list_adapters};
pub use engine::{GpuEngine, GpuOptions, atan2_on_device, cell_hash_on_device};
pub use error::GpuError;

//! GPU engine (wgpu compute, issue 3): the same model, integrators and deterministic sums as the
//! CPU reference, in f32 or f64, on any Vulkan, Metal or DX12 adapter (lavapipe included).
//!
//! Layout, from the ground up (each room uses only rooms below it; `farm-studio look src/gpu`
//! draws it):
//! - ground: [`error`] (what goes wrong, and what to do), [`params`] (Rust mirrors of the WGSL
//!   parameter structs), [`frame`] (positions as block + offset), [`chunks`] (the chunk and page
//!   planner for arrays beyond one binding or buffer, pure);
//! - [`sizes`] (element sizes and fixed limits) and [`context`] (the adapter, device, fallible
//!   buffers);
//! - [`shader`] composes and validates the WGSL in `shaders/` and reflects its bindings;
//!   [`pipeline`] compiles the kernels and dispatches them; [`batch`] lays a batch's replicas
//!   out and estimates its bytes (and how a study is split into batches that fit);
//! - [`cache`] shares devices and compiled kernels between the engines of a process;
//!   [`state`] holds the buffers of a batch: its allocation plan, chunked arrays, bind groups,
//!   the one list of a step's dispatches, backups and readback; [`probes`] runs single WGSL
//!   functions against their Rust twins;
//! - [`engine`] implements `Engine` and `BatchEngine` on top of them: one engine steps many
//!   replicas (the variants of a study) in one GPU state, a single model being the one-replica
//!   batch.
//!
//! A step on the device: (rrp-exact check), kick + drift + rotation, then, only in steps where a
//! particle has moved more than half the Verlet skin since the last rebuild, the hashed contact
//! grid of `grid::cell_hash` (counts, multi-level scan, scatter, in-bucket index order) and the
//! neighbour lists; then the per-bond kernel (with rupture, the break test of each intact bond)
//! and the per-particle kernel (bond gather in CSR
//! order, contacts from the lists in particle-index order, walls, fields, closing kick). Every
//! sum has a fixed order and no float atomics are used, so runs repeat bit for bit.

pub mod batch;
pub mod cache;
pub mod chunks;
pub mod context;
pub mod engine;
pub mod error;
pub mod frame;
pub mod params;
pub mod pipeline;
pub mod probes;
pub mod shader;
pub mod sizes;
pub mod state;
pub mod watch;

pub use batch::{batch_bytes, split_batches};
pub use context::{AdapterChoice, AdapterReport, hardware_adapter_available, list_adapters};
pub use engine::{GpuEngine, GpuOptions};
pub use error::GpuError;
pub use probes::{
    ArithmeticReport, DampingCase, RuptureCase, RuptureResult, arithmetic_on_device, atan2_on_device,
    cell_hash_on_device, damping_on_device, finite_on_device, rupture_on_device,
};

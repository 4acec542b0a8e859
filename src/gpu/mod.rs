//! GPU engine (wgpu compute, issue 3): the same model, integrators and deterministic sums as the
//! CPU reference, in f32 or f64, on any Vulkan, Metal or DX12 adapter (lavapipe included).
//!
//! Layout: [`shader`] composes and validates the WGSL in `shaders/`, [`params`] mirrors its
//! uniform struct, [`context`] picks the adapter, [`cache`] shares devices and
//! compiled kernels between the engines of a process, [`pipeline`] holds the compiled kernels,
//! [`state`] the buffers and the recording of steps, [`batch`] the replica layout of a batch
//! (and how a study is split into batches that fit), [`engine`] the `Engine` and `BatchEngine`
//! implementations: one engine steps many replicas (the variants of a study) in one GPU state,
//! a single model being the one-replica batch.
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

pub use batch::{batch_bytes, split_batches};
pub use context::{AdapterChoice, AdapterReport, hardware_adapter_available, list_adapters};
pub use engine::{GpuEngine, GpuOptions};
pub use error::GpuError;
pub use probes::{
    ArithmeticReport, RuptureCase, RuptureResult, arithmetic_on_device, atan2_on_device, cell_hash_on_device,
    finite_on_device, rupture_on_device,
};

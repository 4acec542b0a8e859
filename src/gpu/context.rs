//! Adapter discovery and device creation. Only Vulkan, Metal and DX12 are accepted: wgpu's GL
//! backend would run compute, but without f64 and with surprises, so it is never picked silently.

use super::error::GpuError;
use crate::engine::Precision;
use serde::Serialize;
use std::sync::{Arc, Mutex};

/// Backends this engine accepts.
pub const BACKENDS: wgpu::Backends = wgpu::Backends::VULKAN.union(wgpu::Backends::METAL).union(wgpu::Backends::DX12);

/// Which adapters `GpuEngine::new` may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdapterChoice {
    /// A real GPU only (`--backend auto` falls back to the CPU engine without one).
    HardwareOnly,
    /// Hardware first, else a software adapter such as lavapipe.
    Any,
}

/// What `rrpdem info` prints about one adapter.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AdapterReport {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub f64: bool,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_storage_buffers_per_stage: u32,
    pub max_workgroups_per_dimension: u32,
}

fn instance(backends: wgpu::Backends) -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    wgpu::Instance::new(desc)
}

fn enumerate(backends: wgpu::Backends) -> Vec<wgpu::Adapter> {
    pollster::block_on(instance(backends).enumerate_adapters(backends))
}

fn is_hardware(t: wgpu::DeviceType) -> bool {
    !matches!(t, wgpu::DeviceType::Cpu)
}

/// Preference order: discrete, integrated, virtual, other, then software.
fn rank(t: wgpu::DeviceType) -> u32 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

fn report(a: &wgpu::Adapter) -> AdapterReport {
    let info = a.get_info();
    let lim = a.limits();
    AdapterReport {
        name: info.name,
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
        f64: a.features().contains(wgpu::Features::SHADER_F64),
        max_buffer_size: lim.max_buffer_size,
        max_storage_buffer_binding_size: lim.max_storage_buffer_binding_size,
        max_storage_buffers_per_stage: lim.max_storage_buffers_per_shader_stage,
        max_workgroups_per_dimension: lim.max_compute_workgroups_per_dimension,
    }
}

/// Every accepted adapter on this machine.
pub fn list_adapters() -> Vec<AdapterReport> {
    enumerate(BACKENDS).iter().map(report).collect()
}

/// Whether a hardware (non-software) adapter is available. Asked once per process:
/// enumerating adapters loads the Vulkan drivers (tens of milliseconds), and a study resolves
/// every variant's engine.
pub fn hardware_adapter_available() -> bool {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PRESENT.get_or_init(|| enumerate(BACKENDS).iter().any(|a| is_hardware(a.get_info().device_type)))
}

/// An open device with what the engine needs to know about it.
pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub adapter_name: String,
    pub backend: String,
    pub limits: wgpu::Limits,
    /// Timestamp queries around compute passes are available (`Features::TIMESTAMP_QUERY`,
    /// requested where the adapter has it): `rrpdem bench --stages`.
    pub timestamps: bool,
    /// Errors wgpu raised outside an error scope (validation, out of memory), drained by
    /// `take_error` after each submission instead of panicking.
    errors: Arc<Mutex<Vec<String>>>,
    /// Set by wgpu's device-lost callback (reason and message); every later call fails with
    /// `GpuError::DeviceLost` instead of touching the device.
    lost: Arc<Mutex<Option<String>>>,
}

/// Storage buffers the widest kernel (`particle`) binds (26 since it adds the dissipative
/// loads, MODEL §10; 27 since it merges the bonded partners the lists leave out, `bonded`; 28
/// since the dissipative force and moment are two arrays, `shader::DLOAD_ARRAYS`; 29 since it
/// leaves the ledger at the evaluated step for the watch in `dload_wall`; lavapipe offers 32,
/// Metal 31).
pub const STORAGE_BUFFERS_NEEDED: u32 = 29;
/// The same with the per-particle arrays bound in two parts (`shader::Parts::Two`), where the
/// widest is the particle kernel: its random reads of the partners' pos and cell and the grid's
/// sorted copies add a binding each, and the dissipative loads none (nothing dissipates there:
/// their accessors bind nothing). (`dissipate` is built for whole arrays only,
/// `shader::WHOLE_ONLY`: dissipation is refused in two parts.)
pub const STORAGE_BUFFERS_NEEDED_PARTS: u32 = 30;

impl GpuContext {
    /// Picks an adapter and opens a device with the adapter's own limits (wgpu's defaults cap
    /// buffers at 256 MiB) and SHADER_F64 where `precision` is f64.
    pub fn new(choice: AdapterChoice, precision: Precision) -> Result<GpuContext, GpuError> {
        let mut adapters = enumerate(BACKENDS);
        if adapters.is_empty() {
            let gl_only = !enumerate(wgpu::Backends::GL).is_empty();
            return Err(GpuError::NoAdapter { gl_only });
        }
        adapters.sort_by_key(|a| rank(a.get_info().device_type));
        if choice == AdapterChoice::HardwareOnly {
            if let Some(a) = adapters.iter().find(|a| !is_hardware(a.get_info().device_type))
                && !adapters.iter().any(|a| is_hardware(a.get_info().device_type))
            {
                return Err(GpuError::NoHardwareAdapter { software: a.get_info().name });
            }
            adapters.retain(|a| is_hardware(a.get_info().device_type));
        }
        let need_f64 = precision == Precision::F64;
        let has_f64 = |a: &wgpu::Adapter| a.features().contains(wgpu::Features::SHADER_F64);
        let adapter = match adapters.iter().position(|a| !need_f64 || has_f64(a)) {
            Some(i) => adapters.swap_remove(i),
            None => return Err(GpuError::NoF64 { adapter: adapters[0].get_info().name }),
        };
        let info = adapter.get_info();
        let limits = adapter.limits();
        if limits.max_storage_buffers_per_shader_stage < STORAGE_BUFFERS_NEEDED {
            return Err(GpuError::TooFewStorageBuffers {
                adapter: info.name,
                have: limits.max_storage_buffers_per_shader_stage,
                need: STORAGE_BUFFERS_NEEDED,
            });
        }
        let mut features = if need_f64 { wgpu::Features::SHADER_F64 } else { wgpu::Features::empty() };
        let timestamps = adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        if timestamps {
            features |= wgpu::Features::TIMESTAMP_QUERY;
        }
        let desc = wgpu::DeviceDescriptor {
            label: Some("rrpdem"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc))
            .map_err(|e| GpuError::RequestDevice { adapter: info.name.clone(), message: e.to_string() })?;
        let errors = Arc::new(Mutex::new(Vec::new()));
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut v) = sink.lock() {
                v.push(e.to_string());
            }
        }));
        let lost = Arc::new(Mutex::new(None));
        let lost_sink = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            if let Ok(mut l) = lost_sink.lock() {
                l.get_or_insert_with(|| {
                    if message.is_empty() { format!("{reason:?}") } else { format!("{reason:?}: {message}") }
                });
            }
        });
        Ok(GpuContext {
            device,
            queue,
            adapter_name: info.name,
            backend: format!("{:?}", info.backend),
            limits,
            timestamps,
            errors,
            lost,
        })
    }

    /// `GpuError::DeviceLost` once wgpu has reported the device lost.
    fn lost_error(&self) -> Option<GpuError> {
        let reason = match self.lost.lock() {
            Ok(l) => l.clone()?,
            Err(_) => "device-lost record poisoned".into(),
        };
        Some(GpuError::DeviceLost { adapter: self.adapter_name.clone(), reason })
    }

    /// Fails if the device was lost. Polls first (without waiting) so that a loss wgpu has
    /// noticed reaches the callback; a loss during later work shows in `wait`/`take_error`.
    pub fn check_lost(&self) -> Result<(), GpuError> {
        let _ = self.device.poll(wgpu::PollType::Poll);
        self.lost_error().map_or(Ok(()), Err)
    }

    /// The first error wgpu reported since the last call, if any (a lost device takes
    /// precedence: the errors it causes only repeat that).
    pub fn take_error(&self) -> Result<(), GpuError> {
        if let Some(e) = self.lost_error() {
            return Err(e);
        }
        let mut v = self.errors.lock().map_err(|_| GpuError::Wgpu("error log poisoned".into()))?;
        match v.drain(..).next() {
            Some(e) => Err(GpuError::Wgpu(e)),
            None => Ok(()),
        }
    }

    /// Waits for all submitted work.
    pub fn wait(&self) -> Result<(), GpuError> {
        let polled = self.device.poll(wgpu::PollType::wait_indefinitely());
        if let Some(e) = self.lost_error() {
            return Err(e);
        }
        polled.map_err(|e| GpuError::Wgpu(e.to_string()))?;
        Ok(())
    }

    /// Destroys the device, as a driver reset or a removed GPU would end it: for tests of the
    /// device-loss path. Everything on this context fails with `GpuError::DeviceLost` afterwards.
    pub fn destroy_device(&self) {
        self.device.destroy();
    }
}

/// Why `create_buffer` failed.
#[derive(Debug)]
pub enum BufferFailure {
    /// The device (or the driver's host memory) is out of memory.
    OutOfMemory(String),
    /// Anything else wgpu refused (a size over the adapter's limits, a lost device).
    Other(String),
}

/// Creates a buffer inside out-of-memory and validation error scopes, so that a failed
/// allocation comes back as a value (wgpu would otherwise report it later, or panic when
/// contents are mapped into the invalid buffer). Never mapped at creation: callers fill buffers
/// with `Queue::write_buffer`.
pub fn create_buffer(
    device: &wgpu::Device,
    label: &str,
    size: u64,
    usage: wgpu::BufferUsages,
) -> Result<wgpu::Buffer, BufferFailure> {
    let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let invalid = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let buffer =
        device.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size, usage, mapped_at_creation: false });
    // Scopes pop in reverse order of their pushes.
    let invalid = pollster::block_on(invalid.pop());
    let oom = pollster::block_on(oom.pop());
    match (oom, invalid) {
        (Some(e), _) => Err(BufferFailure::OutOfMemory(e.to_string())),
        (None, Some(e)) => Err(BufferFailure::Other(e.to_string())),
        (None, None) => Ok(buffer),
    }
}

/// Maps a MAP_READ buffer, waits, copies its bytes out and unmaps it.
pub fn map_read(device: &wgpu::Device, buffer: &wgpu::Buffer) -> Result<Vec<u8>, GpuError> {
    let (tx, rx) = std::sync::mpsc::channel();
    buffer.map_async(wgpu::MapMode::Read, .., move |r| {
        let _ = tx.send(r);
    });
    device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| GpuError::Readback(e.to_string()))?;
    rx.recv().map_err(|e| GpuError::Readback(e.to_string()))?.map_err(|e| GpuError::Readback(e.to_string()))?;
    let bytes = buffer.get_mapped_range(..).map_err(|e| GpuError::Readback(e.to_string()))?.to_vec();
    buffer.unmap();
    Ok(bytes)
}

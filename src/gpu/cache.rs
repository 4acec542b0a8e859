//! Process-wide cache of open devices with their compiled kernels, so that the engines of a
//! study (thousands of variants, one after another) open a device and compile the pipelines once
//! instead of once per variant.
//!
//! A cached device is leased to one engine at a time: an engine takes an idle (device, kernels)
//! pair out of the cache and gives it back when it is dropped. Exclusive use keeps engines
//! independent: the device's log of uncaptured errors and its lost flag only ever belong to the
//! engine holding it, and each engine has its own buffers and bind groups. A pair whose device
//! was lost, or that has an error nobody took, is dropped instead of being reused (checked both
//! when it is given back and when it is taken, since a device can be lost while idle).

use super::context::{AdapterChoice, GpuContext};
use super::error::GpuError;
use super::pipeline::DemPipeline;
use crate::engine::Precision;
use std::sync::{Arc, Mutex};

/// What makes two engines' devices and kernels interchangeable: the adapter choice and the
/// precision pick the adapter and its features (SHADER_F64), the workgroup cap goes into the
/// kernels' dispatch helpers. Other `GpuOptions` only act on the host or on the engine's own
/// buffers, so they share devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheKey {
    pub adapter: AdapterChoice,
    pub precision: Precision,
    pub max_workgroups: Option<u32>,
}

/// Idle pairs kept per key: more than the engines a process runs at once is only memory.
const MAX_IDLE_PER_KEY: usize = 4;

struct Idle {
    key: CacheKey,
    ctx: Arc<GpuContext>,
    pipe: Arc<DemPipeline>,
}

static IDLE: Mutex<Vec<Idle>> = Mutex::new(Vec::new());

/// A device and its kernels held by one engine; dropping it gives them back to the cache (or,
/// for a lease that bypasses the cache, closes the device once the engine's clones are gone).
pub struct Lease {
    key: Option<CacheKey>,
    pub ctx: Arc<GpuContext>,
    pub pipe: Arc<DemPipeline>,
}

/// Whether the pair's device is still usable: not lost, and no uncaptured error pending (a
/// pending error would be blamed on the next engine).
fn healthy(ctx: &GpuContext) -> bool {
    ctx.check_lost().is_ok() && ctx.take_error().is_ok()
}

/// Opens a device and compiles the kernels for `key`.
fn open(key: CacheKey) -> Result<(GpuContext, DemPipeline), GpuError> {
    let ctx = GpuContext::new(key.adapter, key.precision)?;
    let max_groups = ctx.limits.max_compute_workgroups_per_dimension;
    let max_groups = key.max_workgroups.map_or(max_groups, |m| m.clamp(1, max_groups));
    let pipe = DemPipeline::new(&ctx.device, key.precision, max_groups)?;
    Ok((ctx, pipe))
}

/// An idle healthy pair for `key` from the cache, else a newly opened one. With `fresh`, the
/// cache is neither read nor filled: a new device, closed when the lease ends.
pub fn lease(key: CacheKey, fresh: bool) -> Result<Lease, GpuError> {
    if !fresh {
        loop {
            // The lock is not held while checking health (a poll of the device) or opening.
            let found = {
                let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
                idle.iter().position(|i| i.key == key).map(|at| idle.swap_remove(at))
            };
            match found {
                Some(i) if healthy(&i.ctx) => return Ok(Lease { key: Some(key), ctx: i.ctx, pipe: i.pipe }),
                // Lost while idle: dropped here; try the next one.
                Some(_) => continue,
                None => break,
            }
        }
    }
    let (ctx, pipe) = open(key)?;
    Ok(Lease { key: (!fresh).then_some(key), ctx: Arc::new(ctx), pipe: Arc::new(pipe) })
}

impl Lease {
    /// The same device and kernels under a lease that does not return them to the cache: for
    /// an engine built on the device of a running one (`GpuEngine::renumber`), which takes the
    /// original lease over once it stands.
    pub fn same_device(&self) -> Lease {
        Lease { key: None, ctx: self.ctx.clone(), pipe: self.pipe.clone() }
    }
}

/// Idle pairs in the cache for `key` (for tests).
pub fn idle_count(key: CacheKey) -> usize {
    IDLE.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|i| i.key == key).count()
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(key) = self.key else { return };
        if !healthy(&self.ctx) {
            return;
        }
        let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
        if idle.iter().filter(|i| i.key == key).count() < MAX_IDLE_PER_KEY {
            idle.push(Idle { key, ctx: self.ctx.clone(), pipe: self.pipe.clone() });
        }
    }
}

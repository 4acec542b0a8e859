//! Compiled kernels (built once per device and precision), separate from any simulation state,
//! plus the binding and dispatch helpers every kernel goes through.

use super::error::GpuError;
use super::shader::{self, KERNEL_FILES, Parts, SCAN_WG, UsedBinding, WG};
use crate::engine::Precision;
use std::collections::HashMap;

/// One entry point: its pipeline, the bindings it uses (from naga) and its workgroup size.
pub struct Kernel {
    pub name: &'static str,
    pub pipeline: wgpu::ComputePipeline,
    pub uses: Vec<UsedBinding>,
    /// Invocations per workgroup.
    pub size: u32,
}

/// All compute pipelines of the engine.
pub struct DemPipeline {
    pub precision: Precision,
    /// How the kernels bind the per-particle arrays (`shader::Parts`).
    pub parts: Parts,
    kernels: HashMap<&'static str, Kernel>,
    max_workgroups: u32,
}

impl DemPipeline {
    /// Composes, validates and compiles every kernel (the compile errors of wgpu are caught in
    /// an error scope and returned).
    pub fn new(device: &wgpu::Device, precision: Precision, max_workgroups: u32) -> Result<DemPipeline, GpuError> {
        DemPipeline::with_parts(device, precision, max_workgroups, Parts::One)
    }

    /// `new` with the per-particle arrays bound as `parts`.
    pub fn with_parts(
        device: &wgpu::Device,
        precision: Precision,
        max_workgroups: u32,
        parts: Parts,
    ) -> Result<DemPipeline, GpuError> {
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut kernels = HashMap::new();
        for file in KERNEL_FILES {
            let composed = shader::compose_and_validate_parts(file, precision, parts)?;
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(file.name),
                source: wgpu::ShaderSource::Wgsl(composed.source.clone().into()),
            });
            for &entry in file.entry_points {
                if parts == Parts::Two && shader::WHOLE_ONLY.contains(&entry) {
                    continue;
                }
                let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(entry),
                    layout: None,
                    module: &module,
                    entry_point: Some(entry),
                    compilation_options: Default::default(),
                    cache: None,
                });
                let size = if file.name == "scan" { SCAN_WG } else { WG };
                let uses = composed.uses.get(entry).cloned().unwrap_or_default();
                kernels.insert(entry, Kernel { name: entry, pipeline, uses, size });
            }
        }
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(GpuError::Wgpu(format!("compiling the kernels: {e}")));
        }
        Ok(DemPipeline { precision, parts, kernels, max_workgroups: max_workgroups.max(1) })
    }

    /// Workgroups per dimension the dispatches use.
    pub fn max_workgroups(&self) -> u32 {
        self.max_workgroups
    }

    /// Whether `name` was built (`shader::WHOLE_ONLY` kernels are not, for two parts).
    pub fn has(&self, name: &str) -> bool {
        self.kernels.contains_key(name)
    }

    pub fn kernel(&self, name: &str) -> &Kernel {
        // Names are the entry points listed in KERNEL_FILES; a typo is a programming error.
        self.kernels.get(name).unwrap_or_else(|| panic!("no kernel `{name}`"))
    }

    /// Bind groups for `kernel`, one per group index up to the highest it uses (empty groups
    /// included, as the derived layout has them). `lookup` maps a WGSL variable name to a buffer.
    pub fn bind<'a>(
        &self,
        device: &wgpu::Device,
        kernel: &str,
        lookup: &dyn Fn(&str) -> Option<wgpu::BindingResource<'a>>,
    ) -> Result<Vec<wgpu::BindGroup>, GpuError> {
        let k = self.kernel(kernel);
        let n_groups = k.uses.iter().map(|u| u.group + 1).max().unwrap_or(0);
        (0..n_groups)
            .map(|g| {
                let entries = k
                    .uses
                    .iter()
                    .filter(|u| u.group == g)
                    .map(|u| {
                        let resource = lookup(&u.name).ok_or_else(|| {
                            GpuError::Wgpu(format!("kernel `{kernel}` uses `{}`, which has no buffer", u.name))
                        })?;
                        Ok(wgpu::BindGroupEntry { binding: u.binding, resource })
                    })
                    .collect::<Result<Vec<_>, GpuError>>()?;
                Ok(device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some(k.name),
                    layout: &k.pipeline.get_bind_group_layout(g),
                    entries: &entries,
                }))
            })
            .collect()
    }

    /// Dispatches `kernel` with the workgroup counts (x, y, z) at byte `offset` of `args`,
    /// written on the device (zeros: no work at all).
    pub fn dispatch_indirect(
        &self,
        pass: &mut wgpu::ComputePass<'_>,
        kernel: &str,
        groups: &[wgpu::BindGroup],
        args: &wgpu::Buffer,
        offset: u64,
    ) {
        let k = self.kernel(kernel);
        pass.set_pipeline(&k.pipeline);
        for (i, g) in groups.iter().enumerate() {
            pass.set_bind_group(i as u32, g, &[]);
        }
        pass.dispatch_workgroups_indirect(args, offset);
    }

    /// Workgroup grid covering `groups` workgroups: x up to the adapter's per-dimension limit,
    /// the rest folded into y (kernels compute a linear id and bounds-check it).
    pub fn grid(&self, groups: u32) -> (u32, u32) {
        let x = groups.min(self.max_workgroups);
        (x, groups.div_ceil(x.max(1)))
    }

    /// Records one dispatch of `kernel` over `items` items, `per_group` items per workgroup;
    /// returns whether it recorded one (none for no items).
    pub fn dispatch(
        &self,
        pass: &mut wgpu::ComputePass<'_>,
        kernel: &str,
        groups: &[wgpu::BindGroup],
        items: u32,
        per_group: u32,
    ) -> bool {
        if items == 0 {
            return false;
        }
        let k = self.kernel(kernel);
        pass.set_pipeline(&k.pipeline);
        for (i, g) in groups.iter().enumerate() {
            pass.set_bind_group(i as u32, g, &[]);
        }
        let (x, y) = self.grid(items.div_ceil(per_group));
        pass.dispatch_workgroups(x, y, 1);
        true
    }
}

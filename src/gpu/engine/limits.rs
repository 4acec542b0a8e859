//! The adapter's limits checked before a state is allocated: per-particle arrays in one binding
//! or two parts, and the arrays bound whole within a binding.

use super::*;

/// Per-particle arrays larger than a binding are bound in two parts (`shader::Parts`), by
/// kernels compiled for that, from one buffer each: the particles in the first part
/// (`sizes::particle_part_len`) where they are, once the adapter is checked to have the storage
/// bindings and the buffer size that takes; `None` where one binding holds them.
pub(super) fn two_part_limit(
    ctx: &GpuContext,
    n: u64,
    precision: Precision,
    have: u64,
) -> Result<Option<u64>, GpuError> {
    let part_len = particle_part_len(n, precision, have);
    if let Some(p) = part_len {
        let have_storage = ctx.limits.max_storage_buffers_per_shader_stage;
        if have_storage < STORAGE_BUFFERS_NEEDED_PARTS {
            return Err(GpuError::TooFewStorageBuffers {
                adapter: ctx.adapter_name.clone(),
                have: have_storage,
                need: STORAGE_BUFFERS_NEEDED_PARTS,
            });
        }
        let elem = particle_elem(precision);
        let max_particles = (2 * p).min(ctx.limits.max_buffer_size / elem);
        if n > max_particles {
            return Err(GpuError::TooLarge {
                adapter: ctx.adapter_name.clone(),
                what: "particle arrays (vec4 per particle, in two bindings of one buffer)",
                need: n * elem,
                have: max_particles * elem,
                max_particles,
            });
        }
    }
    Ok(part_len)
}

/// Arrays bound whole must fit a binding of `have` bytes (the per-particle ones are checked by
/// `two_part_limit` where they are bound in two parts); those bound in parts (`gpu::chunks`) are
/// paged over as many buffers as they need. Neighbour-list slots and incidence entries are
/// indexed by u32 (`nbr_offsets`, `inc_offsets`, `2·bond + end`).
pub(super) fn check_sizes(
    ctx: &GpuContext,
    totals: &BatchTotals,
    n: u64,
    nbr_capacity: u32,
    precision: Precision,
    have: u64,
    two_parts: bool,
) -> Result<(), GpuError> {
    let slots = totals.n.saturating_mul(nbr_capacity as u64);
    let need = slots.max(2 * totals.nb + 1);
    if need > u32::MAX as u64 {
        return Err(GpuError::TooManyIndices {
            what: if slots > 2 * totals.nb { "neighbour-list slots" } else { "incidence entries" },
            need,
            max_particles: (n as u128 * u32::MAX as u128 / need as u128) as u64,
        });
    }
    let mut sizes = binding_sizes(totals, precision);
    if two_parts {
        // Checked by `two_part_limit`, in two parts.
        sizes.retain(|s| s.0 != PARTICLE_ARRAYS);
    }
    if sizes.iter().any(|&(_, need)| need > have) {
        // How many particles fit is set by the tightest buffer, not the first that fails.
        let fits = |need: u64| (n as u128 * have as u128 / need as u128) as u64;
        let (what, need) = sizes
            .iter()
            .copied()
            .filter(|&(_, need)| need > 0)
            .min_by_key(|&(_, need)| fits(need))
            .unwrap_or(("particle arrays", 0));
        return Err(GpuError::TooLarge {
            adapter: ctx.adapter_name.clone(),
            what,
            need,
            have,
            max_particles: fits(need.max(1)),
        });
    }
    Ok(())
}

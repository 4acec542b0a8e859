//! The chunked arrays of a state (per-bond arrays, incidence entries, neighbour lists) in their
//! pages, and the chunk plan (`gpu::chunks`) taken on: planned at construction and again when the
//! neighbour lists are laid out anew, checked, and turned into the halo's buffers, the chunks'
//! bind groups and the step's dispatch list.
//!
//! **The page rule**: every window a chunk binds of a real (not placeholder) array lies in one
//! page (the page of its aligned start) and within one binding. The planner keeps to it; `replan`
//! checks it again before binding anything, since a window across a page would bind the wrong
//! elements: a plan that broke it is an internal error, never a fallback. Copies and readbacks
//! of ranges that span pages go piece by piece, each element from the page `x / step`
//! (`locate`), so that the overlap's second copy is never the one read.
//!
//! **The halo rule**: a particle chunk reads the results of its particles' bonds below its
//! window from the halo, which the bond chunks fill after computing them; which bonds those are
//! depends on the incidence entries, which the host keeps only while it builds the state and
//! reads back when it plans again (only when some bond can fall below a window: with every bond
//! in one window and one page, the entries are not needed and there is no halo).

use super::super::batch::{BatchLayout, HISTORY_ARRAYS};
use super::super::chunks::{ALIGN, Chunk, ChunkInputs, ChunkPlan, Pages};
use super::super::context::{BufferFailure, create_buffer};
use super::super::error::GpuError;
use super::super::pipeline::DemPipeline;
use super::super::shader::WG;
use super::super::sizes::{MIN_BUFFER, bond_out_elem};
use super::DemState;
use crate::grid::BondedPartners;
use crate::model::Model;
use std::ops::Range;

/// A chunked array in its buffers, one per page.
pub(super) struct Paged {
    pub pages: Pages,
    /// Bytes per element.
    pub elem: u64,
    pub buffers: Vec<wgpu::Buffer>,
}

/// The arrays stored in pages: the per-bond arrays (one page layout, in bonds), the incidence
/// entries and the neighbour lists (each with an overlap of one particle's longest range), and
/// the contact history's rows (one page layout, in particles; `HISTORY_ARRAYS`). Their backups
/// (not bound) are paged as they are.
pub(super) const PAGED: [&str; 14] = [
    "bond_ends",
    "bond_ref",
    "bond_q0",
    "bond_scale",
    "bond_out",
    "inc_entries",
    "inc_peer",
    "bonded",
    "inc_xi",
    "nbr",
    "hist_count",
    "hist_key",
    "hist_xi",
    "whist",
];

/// The window of a chunked array `name` in chunk `c`: incidence, lists, history, or bonds.
pub(super) fn window_of<'c>(c: &'c Chunk, name: &str) -> &'c Range<u64> {
    match name {
        "inc_entries" | "inc_peer" | "bonded" | "inc_xi" => &c.inc,
        "nbr" => &c.nbr,
        _ if HISTORY_ARRAYS.contains(&name) => &c.hist,
        _ => &c.bonds,
    }
}

/// Overlap of the neighbour lists' pages: the longest list (so that each lies whole in the
/// page where it starts), aligned.
pub(super) fn nbr_overlap(longest: u32) -> u64 {
    (longest as u64).next_multiple_of(ALIGN)
}

/// The incidence of a batch (CSR: offsets n + 1, entries 2·bond + end, in each replica's
/// incidence order), replica r's bonds offset by `b_start[r]`; with `peers`, beside each entry
/// the batch index of the bond's other end (`inc_peer`, which `dissipate` reads instead of the
/// bond's ends, so that a particle chunk needs no bond outside its window), else none.
pub(super) fn incidence(models: &[&Model], layout: &BatchLayout, peers: bool) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let (n, nb) = (layout.n as usize, layout.nb as usize);
    let mut inc_offsets: Vec<u32> = Vec::with_capacity(n + 1);
    let mut inc_entries: Vec<u32> = Vec::with_capacity(2 * nb);
    let mut inc_peers: Vec<u32> = Vec::with_capacity(if peers { 2 * nb } else { 0 });
    for (r, model) in models.iter().enumerate() {
        let (offsets, entries) = model.incidence();
        let base = inc_entries.len() as u32;
        inc_offsets.extend(offsets[..model.particles.len()].iter().map(|o| o + base));
        inc_entries.extend(entries.iter().map(|e| e + 2 * layout.b_start[r]));
        if peers {
            let p0 = layout.p_start[r];
            inc_peers.extend(entries.iter().map(|&e| {
                let b = &model.bonds[(e >> 1) as usize];
                p0 + if e & 1 == 0 { b.j } else { b.i }
            }));
        }
    }
    inc_offsets.push(inc_entries.len() as u32);
    (inc_offsets, inc_entries, inc_peers)
}

/// Each particle's bonded partners (batch indices) in its incidence range: the CPU's
/// `grid::BondedPartners` (sorted, without repeats), then `u32::MAX` for the slots a repeated
/// pair leaves free. The array `bonded`, from which the particle kernel merges the pairs its
/// list leaves out.
pub(super) fn bonded_partners(models: &[&Model], layout: &BatchLayout, inc_offsets: &[u32]) -> Vec<u32> {
    let mut out = vec![u32::MAX; *inc_offsets.last().unwrap_or(&0) as usize];
    for (r, model) in models.iter().enumerate() {
        let p0 = layout.p_start[r];
        let partners = BondedPartners::new(model.particles.len(), || model.bonds.iter().map(|b| (b.i, b.j)));
        for p in 0..model.particles.len() {
            let at = inc_offsets[p0 as usize + p] as usize;
            for (o, &q) in out[at..].iter_mut().zip(partners.of(p)) {
                *o = p0 + q;
            }
        }
    }
    out
}

/// What the host keeps to plan chunks again (`DemState::replan`): 12 bytes per particle.
pub(super) struct ChunkHost {
    pub inc_offsets: Vec<u32>,
    /// Each particle's lowest and highest bond (`u32::MAX`, 0 for none).
    pub bond_lo: Vec<u32>,
    pub bond_hi: Vec<u32>,
    /// The bonds of each level-0 reduction workgroup.
    pub reduce_bonds: Vec<Range<u64>>,
}

impl ChunkHost {
    /// What the chunk plan needs of a batch: its incidence offsets, each particle's lowest and
    /// highest bond, and the bonds each level-0 reduction workgroup (`table0`) sums.
    pub fn new(models: &[&Model], layout: &BatchLayout, inc_offsets: Vec<u32>, table0: &[[u32; 4]]) -> ChunkHost {
        let n = layout.n as usize;
        let (mut bond_lo, mut bond_hi) = (vec![u32::MAX; n], vec![0u32; n]);
        for (r, model) in models.iter().enumerate() {
            let (p0, b0) = (layout.p_start[r], layout.b_start[r]);
            for (k, b) in model.bonds.iter().enumerate() {
                let k = b0 + k as u32;
                for i in [(b.i + p0) as usize, (b.j + p0) as usize] {
                    bond_lo[i] = bond_lo[i].min(k);
                    bond_hi[i] = bond_hi[i].max(k);
                }
            }
        }
        let reduce_bonds = table0
            .iter()
            .map(|&[r, t0, _, _]| {
                let (b0, nb_r) = (layout.b_start[r as usize] as u64, layout.n_bonds[r as usize] as u64);
                let t0 = t0 as u64;
                (b0 + t0.min(nb_r))..(b0 + (t0 + WG as u64).min(nb_r))
            })
            .collect();
        ChunkHost { inc_offsets, bond_lo, bond_hi, reduce_bonds }
    }
}

impl DemState {
    /// The chunks for neighbour-list offsets `nbr_offsets` (`gpu::chunks::plan`). Takes the
    /// incidence entries from `host` where given (construction), else reads them back when
    /// some bonds may need the halo (a one-off host wait).
    pub(super) fn plan_for(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        nbr_offsets: &[u32],
        nbr_pages: Pages,
        host: Option<&[u32]>,
    ) -> Result<Result<ChunkPlan, usize>, GpuError> {
        let h = &self.chunk_host;
        let bond_bytes = bond_out_elem(self.precision);
        // The contact history's real arrays (placeholders hold no rows) share one page layout.
        let real = || HISTORY_ARRAYS.iter().map(|a| &self.paged[a]).filter(|p| p.pages.len > 0);
        let hist_bytes = real().map(|p| p.elem).max().unwrap_or(0);
        let hist_pages = real().next().map_or(Pages::one(self.n as u64), |p| p.pages);
        // Bytes per entry of the incidence's widest real array (they share one page layout).
        let inc = ["inc_entries", "inc_peer", "bonded", "inc_xi"].map(|a| &self.paged[a]);
        let inc_bytes = inc.iter().filter(|p| p.pages.len > 0).map(|p| p.elem).max().unwrap_or(4);
        let one_window = (self.n_bonds as u64 + ALIGN) * bond_bytes <= self.max_binding;
        let read: Vec<u32>;
        let entries: &[u32] = if one_window && self.paged["bond_out"].buffers.len() == 1 {
            &[]
        } else if let Some(e) = host {
            e
        } else {
            let raw = self.read_buffers_raw(device, queue, &[("inc_entries", 0, 8 * self.n_bonds as u64)])?;
            read = bytemuck::pod_collect_to_vec(&raw[0]);
            &read
        };
        Ok(super::super::chunks::plan(&ChunkInputs {
            n: self.n as u64,
            n_bonds: self.n_bonds as u64,
            inc_offsets: &h.inc_offsets,
            inc_entries: entries,
            bond_lo: &h.bond_lo,
            bond_hi: &h.bond_hi,
            nbr_offsets,
            reduce_bonds: &h.reduce_bonds,
            bond_bytes,
            max_binding: self.max_binding,
            part_len: self.parts.map(|p| p.0),
            bond_pages: self.paged["bond_out"].pages,
            inc_pages: self.paged["inc_entries"].pages,
            inc_bytes,
            nbr_pages,
            hist_bytes,
            hist_pages,
        }))
    }

    /// The neighbour-list offsets in use (n + 1).
    pub(super) fn nbr_offsets_in_use(&self) -> Vec<u32> {
        if self.nbr_offsets.is_empty() {
            (0..=self.n).map(|i| i * self.nbr_max_capacity).collect()
        } else {
            self.nbr_offsets.clone()
        }
    }

    /// Takes on the chunks `plan` of the chunked kernels (`plan_for`, after construction and after
    /// the neighbour lists are laid out anew): checks the page rule, writes the halo's offsets
    /// and makes its buffers, then the chunks' bind groups (`bind_chunks`), the step's dispatch
    /// list and the grid stage's indirect arguments (`record::step_dispatches`,
    /// `bind_grid_args`).
    pub(super) fn replan(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        pipe: &DemPipeline,
        plan: ChunkPlan,
    ) -> Result<(), GpuError> {
        self.check_windows(&plan)?;
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        // The halo: its offsets (planned with the state) and the copies and their lists.
        queue.write_buffer(&self.buffers["halo_off"], 0, bytemuck::cast_slice(&plan.halo_off));
        let halo_entries = plan.halo_src.len() as u64;
        for (name, bytes) in [
            ("halo", bond_out_elem(self.precision) * halo_entries),
            ("halo_src", 4 * halo_entries),
            ("halo_fill", 4 * halo_entries),
        ] {
            let size = bytes.max(MIN_BUFFER as u64);
            let b = create_buffer(device, name, size, storage)
                .map_err(|e| GpuError::Wgpu(format!("creating `{name}` ({size} bytes): {e:?}")))?;
            self.buffers.insert(name, b);
        }
        if halo_entries > 0 {
            queue.write_buffer(&self.buffers["halo_src"], 0, bytemuck::cast_slice(&plan.halo_src));
            queue.write_buffer(&self.buffers["halo_fill"], 0, bytemuck::cast_slice(&plan.halo_fill));
        }
        let chunk_bind = self.bind_chunks(device, queue, pipe, &plan)?;
        let replicas = self.layout.replicas() as u32;
        let steps = super::record::step_dispatches(
            self.n,
            replicas,
            self.buckets,
            &self.scan_lens,
            &plan,
            &self.watch.groups,
            self.dissipation,
        );
        let (grid_full, grid_args, set) = self.bind_grid_args(device, queue, pipe, &steps)?;
        self.bind.insert("grid_args_set", set);
        self.steps = steps;
        self.grid_args = Some((grid_full, grid_args));
        self.chunks = plan;
        self.chunk_bind = chunk_bind;
        Ok(())
    }

    /// The page rule (see the module note), checked for every window of `plan`.
    fn check_windows(&self, plan: &ChunkPlan) -> Result<(), GpuError> {
        for c in plan.particles.iter().chain(&plan.bonds).chain(&plan.reduce) {
            for name in PAGED {
                let p = &self.paged[name];
                let w = window_of(c, name);
                let inside = w.end <= w.start
                    || p.pages.len == 0
                    || (p.pages.holds(w.start, w.end) && (w.end - w.start) * p.elem <= self.max_binding);
                if !inside {
                    return Err(GpuError::Wgpu(format!(
                        "internal: the chunk plan binds elements {w:?} of `{name}` across a page or beyond a binding \
                         ({:?}); please report this",
                        p.pages
                    )));
                }
            }
        }
        Ok(())
    }

    /// Lays the neighbour lists out anew (after an overflow): list i gets the slots
    /// `offsets[i] .. offsets[i + 1]` (n + 1 offsets, from `engine::plan_nbr_offsets`), in a new
    /// list buffer (paged as it needs), and the chunks are planned again for them. Growing is an
    /// optimisation only (an overflowing list falls back to the grid, with the same result), so
    /// a layout that some list alone cannot fit, that would exceed the memory budget or that the
    /// device has no room for leaves everything as it is: returns whether it changed. The lists
    /// must be rebuilt before use.
    pub fn set_nbr_offsets(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        pipe: &DemPipeline,
        offsets: Vec<u32>,
    ) -> Result<bool, GpuError> {
        debug_assert_eq!(offsets.len(), self.n as usize + 1);
        let entries = offsets.last().copied().unwrap_or(0) as u64;
        let longest = offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        let Some(pages) = Pages::new(entries, 4, self.max_buffer, nbr_overlap(longest)) else {
            return Ok(false); // some list alone would exceed a buffer
        };
        let Ok(plan) = self.plan_for(device, queue, &offsets, pages, None)? else {
            return Ok(false); // some list alone would exceed a binding
        };
        let old: u64 = self.paged["nbr"].buffers.iter().map(|b| b.size()).sum();
        let sizes: Vec<u64> = (0..pages.count())
            .map(|k| {
                let e = pages.range(k);
                (4 * (e.end - e.start)).max(MIN_BUFFER as u64).next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
            })
            .collect();
        let bytes: u64 = sizes.iter().sum();
        if self.memory_budget.is_some_and(|b| self.bytes - old + bytes > b) {
            return Ok(false);
        }
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let mut buffers = Vec::with_capacity(sizes.len());
        for size in sizes {
            match create_buffer(device, "nbr", size, usage) {
                Ok(b) => buffers.push(b),
                Err(BufferFailure::OutOfMemory(_)) => return Ok(false),
                Err(BufferFailure::Other(e)) => {
                    return Err(GpuError::Wgpu(format!("creating buffer `nbr` ({size} bytes): {e}")));
                }
            }
        }
        self.paged.insert("nbr", Paged { pages, elem: 4, buffers });
        queue.write_buffer(&self.buffers["nbr_offsets"], 0, bytemuck::cast_slice(&offsets));
        self.bytes = self.bytes - old + bytes;
        self.nbr_entries = entries;
        self.nbr_max_capacity = longest;
        self.nbr_offsets = offsets;
        self.replan(device, queue, pipe, plan)?;
        Ok(true)
    }

    /// Where the bytes `offset .. offset + len` of a named array lie: (buffer, offset in it,
    /// bytes, place relative to `offset`); for a paged array piece by piece, each element from
    /// the page `x / step` (`Pages::pieces`).
    pub(super) fn locate(&self, name: &str, offset: u64, len: u64) -> Vec<(&wgpu::Buffer, u64, u64, u64)> {
        match self.paged.get(name) {
            Some(p) => {
                debug_assert!(offset.is_multiple_of(p.elem) && len.is_multiple_of(p.elem), "{name}: {offset} + {len}");
                let e = p.elem;
                p.pages
                    .pieces(offset / e..(offset + len) / e)
                    .into_iter()
                    .map(|(k, r, at)| (&p.buffers[k], r.start * e, (r.end - r.start) * e, at * e))
                    .collect()
            }
            None => vec![(&self.buffers[name], offset, len, 0)],
        }
    }
}

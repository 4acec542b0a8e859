//! The allocation plan of a state: every buffer, its size and its contents, listed before any is
//! allocated (so that the total is known up front, for the memory budget and the out-of-memory
//! report), then allocated and filled in that order, each array's bytes made just before its
//! upload so that the host holds one array at a time, not the whole state.
//!
//! The order of the list is the order of allocation: an out-of-memory report names the first
//! buffer that did not fit and what was allocated before it, so the order is part of what a user
//! sees (and `batch::planned_sizes`, which estimates the same list for a batch that is not built,
//! must keep to the same buffers; a test checks the totals agree).
//!
//! Sizes follow from a few facts of the batch, computed first (`Shape`): replica ranges
//! (`BatchLayout`), the bucket table, whether the per-particle arrays are bound in two parts, the
//! reduction tables, the scan levels, how the chunked arrays lie in pages, and the break records.

use super::super::batch::{
    BatchLayout, BatchTotals, HISTORY_ARRAYS, binding_sizes, bucket_count, chunked_sizes, history_rows, history_sizes,
};
use super::super::chunks::{ALIGN, Pages};
use super::super::context::{BufferFailure, create_buffer};
use super::super::error::GpuError;
use super::super::frame::{Frame, uses_blocks};
use super::super::shader::{DLOAD_ARRAYS, NQ, NW, Parts, SCAN_WG};
use super::super::sizes::{CELL_BYTES, MIN_BUFFER, bond_out_elem, particle_part_len, push_reals, real_size};
use super::super::watch::watch_gpu_size;
use super::chunked::{Paged, bonded_partners, incidence, nbr_overlap};
use super::record::initial_status;
use super::{BROKEN, CELL, DLOAD_BACKUPS};
use crate::engine::Precision;
use crate::model::{Bond, Model};
use glam::{DQuat, DVec3};
use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

/// What a state is built from (`DemState::new`): the models of the batch (replica r's positions
/// split into block and offset by `frames[r]`), their reference attitudes and positions where
/// the bonds agree on them (`None`: per bond), the bytes of the uniform parameters, of the
/// per-replica parameters (`ReplicaGpu`) and of every replica's walls in order, and the limits.
#[derive(Clone, Copy)]
pub struct StateInputs<'a> {
    pub models: &'a [&'a Model],
    pub ref_q: &'a [Option<Cow<'a, [DQuat]>>],
    pub ref_x: &'a [Option<&'a [DVec3]>],
    pub frames: &'a [Frame],
    pub params_bytes: &'a [u8],
    pub reps_bytes: &'a [u8],
    pub walls_bytes: &'a [u8],
    /// Initial capacity of every neighbour list.
    pub nbr_capacity: u32,
    /// The lists leave bonded pairs out (not `GpuOptions::list_bonded_pairs`): `bonded` is real
    /// where some replica has bonds.
    pub unlisted: bool,
    /// Caps the bytes allocated (see `GpuOptions`).
    pub memory_budget: Option<u64>,
    /// Most bytes one storage binding may hold.
    pub max_binding: u64,
    /// Most bytes one buffer may hold (the chunked arrays beyond it are paged).
    pub max_buffer: u64,
    /// Most break records one batch of steps holds.
    pub max_break_records: u64,
}

/// Per-buffer size needs of one model alone, checked against the adapter's limits before
/// anything is allocated (`batch::binding_sizes` for a batch).
pub fn buffer_sizes(model: &Model, precision: Precision, nbr_capacity: u32) -> Vec<(&'static str, u64)> {
    let t = BatchTotals::of(&[model]);
    let mut v = binding_sizes(&t, precision);
    v.extend(chunked_sizes(&t, precision, nbr_capacity));
    v
}

/// The facts of a batch that the sizes of its buffers follow from.
pub(super) struct Shape {
    pub layout: BatchLayout,
    /// Contact-grid buckets (`batch::bucket_count`).
    pub buckets: usize,
    /// (particles in the first part, particles) when the per-particle arrays are bound in two
    /// parts (`sizes::particle_part_len`).
    pub parts: Option<(u64, u64)>,
    /// The incidence (CSR over the batch: offsets n + 1, entries 2·bond + end), which the host
    /// keeps (offsets) and plans chunks with.
    pub inc_offsets: Vec<u32>,
    pub inc_entries: Vec<u32>,
    /// Beside each incidence entry, the batch index of the bond's other end, where some
    /// replica has binder damping (`chunked::incidence`); empty otherwise.
    pub inc_peers: Vec<u32>,
    /// Each particle's bonded partners, sorted, beside its incidence (`chunked::bonded_partners`),
    /// where some replica's lists leave bonded pairs out; else empty.
    pub bonded: Vec<u32>,
    /// Status words at the start (`record::initial_status`).
    pub status: Vec<u32>,
    /// The segmented reduction's chunk tables (`BatchLayout::reduce_tables`).
    pub table0: Vec<[u32; 4]>,
    pub table_levels: Vec<Vec<[u32; 4]>>,
    /// The watch's (`BatchLayout::watch_tables`).
    pub watch0: Vec<[u32; 4]>,
    pub watch_levels: Vec<Vec<[u32; 4]>>,
    /// Lengths of the scan levels: M = buckets + 1, ⌈M/B⌉, … down to one block (B = 2·SCAN_WG
    /// values per block).
    pub scan_lens: Vec<usize>,
    /// How the per-bond arrays, the incidence entries and the neighbour lists lie in buffers.
    pub bond_pages: Pages,
    pub inc_pages: Pages,
    /// The bonded pairs' tangential history beside the incidence is real (`inc_xi`: pair
    /// friction, and bonds the lists leave out: `BatchTotals::bond_history`).
    pub bond_history: bool,
    pub nbr_pages: Pages,
    /// How each of the contact history's arrays (`HISTORY_ARRAYS`) lies in buffers, in
    /// particles: one layout from the widest rows for the real ones, none for placeholders.
    pub hist_pages: [Pages; 4],
    /// Break records one batch holds: one per bond that may break, at most what one binding
    /// holds and `max_break_records` (a batch that breaks more is taken again in shorter ones).
    pub break_capacity: u64,
}

impl Shape {
    /// The shape of a batch for kernels compiled for `parts`, which must be the binding the
    /// batch needs.
    pub fn new(s: &StateInputs<'_>, precision: Precision, parts: Parts) -> Result<Shape, GpuError> {
        let layout = BatchLayout::new(s.models);
        let n = layout.n as u64;
        let buckets = bucket_count(n, s.max_binding) as usize;
        let two = particle_part_len(n, precision, s.max_binding).map(|p| (p, n));
        if two.is_some() != (parts == Parts::Two) {
            return Err(GpuError::Wgpu(format!(
                "internal: kernels compiled for {parts:?} per-particle bindings, the state needs {two:?}; please report this"
            )));
        }
        let binder =
            s.models.iter().any(|m| m.params.dissipation.is_some_and(|d| crate::gpu::batch::reads_bond_peers(&d)));
        let (inc_offsets, inc_entries, inc_peers) = incidence(s.models, &layout, binder);
        let unlisted = s.unlisted && s.models.iter().any(|m| !m.bonds.is_empty());
        let bonded = if unlisted { bonded_partners(s.models, &layout, &inc_offsets) } else { Vec::new() };
        let status = initial_status(true, layout.replicas());
        let (table0, table_levels) = layout.reduce_tables();
        let (watch0, watch_levels) = layout.watch_tables();
        let block = 2 * SCAN_WG as usize;
        let mut scan_lens = vec![buckets + 1];
        while *scan_lens.last().unwrap_or(&1) > block {
            let l = scan_lens.last().copied().unwrap_or(1).div_ceil(block);
            scan_lens.push(l);
        }
        // The chunked arrays, in pages where they exceed one buffer (`gpu::chunks::Pages`).
        let too_small = |what: &str| {
            GpuError::Wgpu(format!("buffers of {} bytes cannot hold {ALIGN} elements of the {what}", s.max_buffer))
        };
        let nb = layout.nb as u64;
        let bond_pages =
            Pages::new(nb, bond_out_elem(precision), s.max_buffer, 0).ok_or_else(|| too_small("bond results"))?;
        let longest = inc_offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0) as u64;
        // The incidence's arrays share one page layout, from the widest: `inc_xi`'s vec4 where
        // it is real, else a word.
        let bond_history = unlisted
            && s.models.iter().any(|m| m.params.dissipation.is_some_and(|d| d.mu > 0.0))
            && crate::gpu::batch::bond_history_fits(layout.nb as u64, precision, s.max_buffer);
        let inc_elem = if bond_history { 4 * real_size(precision) as u64 } else { 4 };
        let inc_pages = Pages::new(inc_entries.len() as u64, inc_elem, s.max_buffer, longest.next_multiple_of(ALIGN))
            .ok_or_else(|| too_small("incidence entries"))?;
        let nbr_pages = Pages::new(s.nbr_capacity as u64 * n, 4, s.max_buffer, nbr_overlap(s.nbr_capacity))
            .ok_or_else(|| too_small("neighbour lists"))?;
        // The contact history's arrays that hold rows (`history_sizes`, as the memory accounting
        // counts them; placeholders otherwise), in one page layout from the widest rows.
        // (Only what the history's sizes read: `BatchTotals::of` would check every bond's references.)
        let d = |m: &Model| m.params.dissipation.unwrap_or_default();
        let totals = BatchTotals {
            n,
            pair_friction: s.models.iter().any(|m| d(m).mu > 0.0),
            wall_friction: s.models.iter().any(|m| d(m).mu_wall > 0.0),
            max_walls: wall_slots(s.models) as u64,
            ..Default::default()
        };
        let real = history_sizes(&totals, precision).map(|b| b > 0);
        let rows = history_rows(precision, totals.max_walls);
        let widest = (0..4).filter(|&k| real[k]).map(|k| rows[k]).max().unwrap_or(0);
        let pages = Pages::new(n, widest.max(1), s.max_buffer, 0).ok_or_else(|| too_small("contact history"))?;
        let hist_pages = std::array::from_fn(|k| if real[k] { pages } else { Pages::one(0) });
        let nr = if layout.rupture.iter().any(|&r| r) { nb } else { 0 };
        // 32 bytes a record in f32, 48 in f64 (`break_at`, `break_id`).
        let rs = real_size(precision) as u64;
        let break_capacity = nr.min(s.max_binding / (4 * rs).max(16)).min(s.max_break_records);
        Ok(Shape {
            layout,
            buckets,
            parts: two,
            inc_offsets,
            inc_entries,
            inc_peers,
            bonded,
            status,
            table0,
            table_levels,
            watch0,
            watch_levels,
            scan_lens,
            bond_pages,
            inc_pages,
            bond_history,
            nbr_pages,
            hist_pages,
            break_capacity,
        })
    }
}

/// What a planned buffer starts with: zeros, bytes at hand, or bytes made when the buffer is
/// allocated, so that the host holds one array's bytes at a time, not the whole state's.
enum Fill<'a> {
    Zeros,
    Bytes(Vec<u8>),
    Make(Box<dyn FnOnce() -> Vec<u8> + 'a>),
}

/// What makes the bytes of a page of a chunked array from its element range.
type MakePage<'a> = std::rc::Rc<dyn Fn(Range<u64>) -> Vec<u8> + 'a>;

fn make_pages<'a>(f: impl Fn(Range<u64>) -> Vec<u8> + 'a) -> Option<MakePage<'a>> {
    Some(std::rc::Rc::new(f))
}

/// Bytes written to the device before the uploads are flushed (`queue.submit` and a wait), so
/// that wgpu's staging copies of them are freed: the host then holds at most this much of
/// them, however large the state (an array's bytes are written in slices of this size).
const UPLOAD_FLUSH: usize = 64 << 20;

const STORAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_DST).union(wgpu::BufferUsages::COPY_SRC);
const UNIFORM: wgpu::BufferUsages = wgpu::BufferUsages::UNIFORM.union(wgpu::BufferUsages::COPY_DST);

/// Buffers of the state in allocation order, with their sizes and contents; and where each
/// named one is in that order.
#[derive(Default)]
pub(super) struct Planned<'a> {
    items: Vec<(&'static str, u64, wgpu::BufferUsages, Fill<'a>)>,
    /// Buffers bound whole, by name.
    whole_at: Vec<(&'static str, usize)>,
    /// Chunked arrays: name, bytes per element, pages and the buffer of each page.
    paged_at: Vec<(&'static str, u64, Pages, Vec<usize>)>,
    /// Per scan level but the first, its block totals; the top level's placeholder; per level,
    /// its length uniform.
    scan_aux: Vec<usize>,
    scan_top: usize,
    scan_len: Vec<usize>,
    /// Per reduction level: its workgroups and its uniform; the same for the watch's sums.
    red_len: Vec<(usize, usize)>,
    watch_len: Vec<(usize, usize)>,
    readback: usize,
}

/// The allocated buffers of a plan, by role.
pub(super) struct Allocated {
    pub buffers: HashMap<&'static str, wgpu::Buffer>,
    pub paged: HashMap<&'static str, Paged>,
    pub scan_aux: Vec<wgpu::Buffer>,
    pub scan_top: wgpu::Buffer,
    pub scan_len: Vec<wgpu::Buffer>,
    pub red_len: Vec<(usize, wgpu::Buffer)>,
    pub watch_len: Vec<(usize, wgpu::Buffer)>,
    pub readback: wgpu::Buffer,
    /// Bytes of all of them.
    pub bytes: u64,
}

impl<'a> Planned<'a> {
    /// Every buffer of a state of `shape` made from `s`, in allocation order.
    pub fn new(s: StateInputs<'a>, shape: &'a Shape, precision: Precision) -> Planned<'a> {
        let mut p = Planned::default();
        p.particles(s, shape, precision);
        p.bonds(s, shape, precision);
        p.indices(s, shape, precision);
        p.results(s, shape, precision);
        p.levels(shape, precision);
        p
    }

    /// Plans a buffer of `len` bytes (padded to at least `MIN_BUFFER`) that starts with `fill`;
    /// returns its index in the allocation.
    fn add(&mut self, name: &'static str, len: usize, fill: Fill<'a>, usage: wgpu::BufferUsages) -> usize {
        let size = len.max(MIN_BUFFER).next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT as usize) as u64;
        self.items.push((name, size, usage, fill));
        self.items.len() - 1
    }

    /// A buffer bound whole, found by its name.
    fn add_whole(&mut self, name: &'static str, len: usize, fill: Fill<'a>, usage: wgpu::BufferUsages) {
        let k = self.add(name, len, fill, usage);
        self.whole_at.push((name, k));
    }

    /// A chunked array, one buffer per page, each made by `make` from its element range when it
    /// is allocated (zeros without `make`).
    fn add_paged(&mut self, name: &'static str, elem: u64, pages: Pages, make: Option<MakePage<'a>>) {
        let ids = (0..pages.count())
            .map(|k| {
                let e = pages.range(k);
                let len = ((e.end - e.start) * elem) as usize;
                let fill = match &make {
                    Some(f) => {
                        let f = f.clone();
                        Fill::Make(Box::new(move || f(e)))
                    }
                    None => Fill::Zeros,
                };
                self.add(name, len, fill, STORAGE)
            })
            .collect();
        self.paged_at.push((name, elem, pages, ids));
    }

    /// The uniforms and the model's per-particle state and constants.
    fn particles(&mut self, s: StateInputs<'a>, shape: &Shape, precision: Precision) {
        let v4 = 4 * real_size(precision) * shape.layout.n as usize;
        for (name, bytes) in [("params", s.params_bytes), ("reps", s.reps_bytes), ("walls", s.walls_bytes)] {
            let usage = if name == "params" { UNIFORM } else { STORAGE };
            self.add_whole(name, bytes.len(), Fill::Bytes(bytes.to_vec()), usage);
        }
        self.add_whole("pos", v4, vec4(s, precision, position), STORAGE);
        self.add_whole("vel", v4, vec4(s, precision, |m, _, i| m.particles.v[i].extend(0.0).to_array()), STORAGE);
        self.add_whole("quat", v4, vec4(s, precision, |m, _, i| m.particles.q[i].to_array()), STORAGE);
        self.add_whole("omega", v4, vec4(s, precision, |m, _, i| m.particles.w[i].extend(0.0).to_array()), STORAGE);
        let inertial = |m: &Model, _: &Frame, i: usize| {
            let (mass, inertia) = (m.particles.mass[i], m.particles.inertia[i]);
            // The inverses are 0 for a fixed particle (not integrated).
            if m.particles.fixed[i] { [mass, inertia, 0.0, 0.0] } else { [mass, inertia, 1.0 / mass, 1.0 / inertia] }
        };
        self.add_whole("inertial", v4, vec4(s, precision, inertial), STORAGE);
        // Bit 0: fixed; bits 1..: the replica.
        let models = s.models;
        let fixed = Fill::Make(Box::new(move || {
            particle_bytes(models, 4, |r, i, out| {
                out.extend_from_slice(&(models[r].particles.fixed[i] as u32 | (r as u32) << 1).to_ne_bytes())
            })
        }));
        self.add_whole("fixed", 4 * shape.layout.n as usize, fixed, STORAGE);
    }

    /// The bonds' ends and references, with the particles' reference positions and attitudes
    /// that stand in for the per-bond ones where the bonds agree on them.
    fn bonds(&mut self, s: StateInputs<'a>, shape: &'a Shape, precision: Precision) {
        let (n, rs) = (shape.layout.n as usize, real_size(precision));
        let rs64 = rs as u64;
        let per_bond = |elem: u64, f: fn(&Model, &Bond, u32, Precision, &mut Vec<u8>)| {
            let (models, layout) = (s.models, &shape.layout);
            make_pages(move |range| {
                bond_bytes(models, &layout.b_start, range, elem as usize, |r, b, out| {
                    f(models[r], b, layout.p_start[r], precision, out)
                })
            })
        };
        let ends = |_: &Model, b: &Bond, p0: u32, _, out: &mut Vec<u8>| {
            out.extend_from_slice(&(b.i + p0).to_ne_bytes());
            out.extend_from_slice(&(b.j + p0).to_ne_bytes());
        };
        self.add_paged("bond_ends", 8, shape.bond_pages, per_bond(8, ends));
        // Reference directions and lengths per bond only where some replica's particles are not
        // where its bonds were made (then for the whole batch); otherwise from `ref_pos`.
        if s.ref_x.iter().any(Option::is_none) {
            let dir =
                |_: &Model, b: &Bond, _, p, out: &mut Vec<u8>| push_reals(out, &b.dhat0.extend(b.l0).to_array(), p);
            self.add_paged("bond_ref", 4 * rs64, shape.bond_pages, per_bond(4 * rs64, dir));
        } else {
            self.add_paged("bond_ref", 4 * rs64, Pages::one(0), None);
        }
        // Reference positions split as positions are (a replica with per-bond references gets
        // its current positions, which no kernel reads).
        let (models, frames, ref_x) = (s.models, s.frames, s.ref_x);
        let reference = move |r: usize, i: usize| frames[r].split(ref_x[r].unwrap_or(&models[r].particles.x)[i]);
        let ref_pos = Fill::Make(Box::new(move || {
            particle_bytes(models, 4 * rs, |r, i, out| {
                let (_, o) = reference(r, i);
                push_reals(out, &o.extend(0.0).to_array(), precision)
            })
        }));
        self.add_whole("ref_pos", 4 * rs * n, ref_pos, STORAGE);
        let blocks = uses_blocks(precision);
        let ref_cell = Fill::Make(Box::new(move || {
            if !blocks {
                return Vec::new();
            }
            particle_bytes(models, CELL_BYTES, |r, i, out| push_block(out, reference(r, i).0))
        }));
        self.add_whole("ref_cell", if blocks { CELL_BYTES * n } else { 0 }, ref_cell, STORAGE);
        // Per-bond reference attitudes only where some replica's bonds disagree on a particle's
        // (then for the whole batch, so that bond k's are at 2k, 2k + 1).
        if s.ref_q.iter().any(Option::is_none) {
            let q0 = |_: &Model, b: &Bond, _, p, out: &mut Vec<u8>| {
                push_reals(out, &b.q_i0.to_array(), p);
                push_reals(out, &b.q_j0.to_array(), p);
            };
            self.add_paged("bond_q0", 8 * rs64, shape.bond_pages, per_bond(8 * rs64, q0));
        } else {
            self.add_paged("bond_q0", 8 * rs64, Pages::one(0), None);
        }
        let ref_q = s.ref_q;
        let q_ref = Fill::Make(Box::new(move || {
            particle_bytes(models, 4 * rs, |r, i, out| {
                push_reals(out, &ref_q[r].as_deref().unwrap_or(&models[r].particles.q)[i].to_array(), precision)
            })
        }));
        self.add_whole("q_ref", 4 * rs * n, q_ref, STORAGE);
    }

    /// The incidence, the neighbour lists' offsets, the halo's offsets, the bucket table, the
    /// status words and the positions the grid and the blocks start from.
    fn indices(&mut self, s: StateInputs<'a>, shape: &'a Shape, precision: Precision) {
        let n = shape.layout.n as usize;
        self.add_whole("inc_offsets", 4 * (n + 1), Fill::Bytes(words(&shape.inc_offsets)), STORAGE);
        let entries = &shape.inc_entries;
        let make = make_pages(move |e| words(&entries[e.start as usize..e.end as usize]));
        self.add_paged("inc_entries", 4, shape.inc_pages, make);
        // Arrays of a word beside each incidence entry, in the same pages (a placeholder where
        // empty): the bonds' other ends (binder damping) and each particle's bonded partners,
        // sorted (where some replica leaves bonded pairs out of its lists).
        for (name, values) in [("inc_peer", &shape.inc_peers), ("bonded", &shape.bonded)] {
            if values.is_empty() {
                self.add_paged(name, 4, Pages::one(0), None);
            } else {
                let make = make_pages(move |e| words(&values[e.start as usize..e.end as usize]));
                self.add_paged(name, 4, shape.inc_pages, make);
            }
        }
        // The bonded pairs' tangential history (a vec4 per entry, zeros) and its backup, where
        // real (`Shape::bond_history`).
        let v4 = 4 * real_size(precision) as u64;
        let pages = if shape.bond_history { shape.inc_pages } else { Pages::one(0) };
        for name in BOND_HISTORY {
            self.add_paged(name, v4, pages, None);
        }
        // Every list starts with the same capacity; the engine plans them per particle once
        // some overflow (`DemState::set_nbr_offsets`).
        let offsets: Vec<u32> = (0..=n as u32).map(|i| i * s.nbr_capacity).collect();
        self.add_whole("nbr_offsets", 4 * (n + 1), Fill::Bytes(words(&offsets)), STORAGE);
        // Written by `replan` (gpu::chunks: which far bonds each particle reads from the halo).
        self.add_whole("halo_off", 4 * (n + 1), Fill::Zeros, STORAGE);
        // The scan runs over all buckets + 1 entries, so that the last one ends at the number of
        // particles counted this rebuild (frozen replicas' are not): no stale entry lies inside
        // any bucket's range.
        self.add_whole("bucket_start", 4 * (shape.buckets + 1), Fill::Zeros, STORAGE);
        self.add_whole("status", 4 * shape.status.len(), Fill::Bytes(words(&shape.status)), STORAGE);
        self.add_whole("x_ref", 4 * real_size(precision) * n, vec4(s, precision, position), STORAGE);
        let (models, frames) = (s.models, s.frames);
        let cells = Fill::Make(Box::new(move || {
            particle_bytes(models, CELL_BYTES, |r, i, out| push_block(out, frames[r].split(models[r].particles.x[i]).0))
        }));
        self.add_whole(CELL.0, CELL_BYTES * n, cells, STORAGE);
    }

    /// Rupture scales, the reduction table, the kernels' results and scratch arrays, the
    /// backups, the break records, the bond results, the neighbour lists and the broken flags.
    fn results(&mut self, s: StateInputs<'a>, shape: &'a Shape, precision: Precision) {
        let (n, rs) = (shape.layout.n as usize, real_size(precision));
        let v4 = 4 * rs * n;
        // Rupture buffers only where bonds may break; otherwise minimal placeholders for the
        // bindings, which the kernels never read (FLAG_RUPTURE is off). The thresholds' scales
        // only where some replica has Weibull scatter (FLAG_WEIBULL; the others' are never
        // read): without it every scale is 1.
        if s.models.iter().any(|m| m.params.weibull()) {
            let (models, layout) = (s.models, &shape.layout);
            let make = make_pages(move |range| {
                bond_bytes(models, &layout.b_start, range, rs, |r, b, out| {
                    push_reals(out, &[models[r].bond_scale(b)], precision)
                })
            });
            self.add_paged("bond_scale", rs as u64, shape.bond_pages, make);
        } else {
            self.add_paged("bond_scale", rs as u64, Pages::one(0), None);
        }
        let mut table: Vec<u32> = shape.table0.iter().flatten().copied().collect();
        for t in &shape.table_levels {
            table.extend(t.iter().flatten());
        }
        self.add_whole("red_table", 4 * table.len(), Fill::Bytes(words(&table)), STORAGE);
        let mut table: Vec<u32> = shape.watch0.iter().flatten().copied().collect();
        for t in &shape.watch_levels {
            table.extend(t.iter().flatten());
        }
        self.add_whole("watch_table", 4 * table.len(), Fill::Bytes(words(&table)), STORAGE);
        let records = shape.table0.len();
        let records1 = shape.table_levels.first().map_or(1, |t| t.len());
        let watch_records = shape.watch0.len();
        let watch_records1 = shape.watch_levels.first().map_or(1, |t| t.len());
        let replicas = shape.layout.replicas();
        let nr_records = shape.break_capacity as usize;
        let blocks = if uses_blocks(precision) { CELL_BYTES * n } else { 0 };
        // The dissipative loads (three arrays of a vec4 per particle) and their backups, where
        // some replica dissipates (MODEL §10); placeholders otherwise.
        let dload = if s.models.iter().any(|m| m.params.dissipation.is_some()) { v4 } else { 0 };
        for name in DLOAD_ARRAYS.into_iter().chain(DLOAD_BACKUPS) {
            self.add_whole(name, dload, Fill::Zeros, STORAGE);
        }
        // The frictional contacts' history and its backup: rows per particle in one page layout
        // (in particles, from the widest rows), which the planner keeps each window within;
        // placeholders where nothing has that friction.
        let rows = history_rows(precision, wall_slots(s.models) as u64);
        for (k, name) in HISTORY_ARRAYS.into_iter().enumerate() {
            let pages = shape.hist_pages[k];
            self.add_paged(name, rows[k].max(4), pages, None);
            self.add_paged(HISTORY_BACKUPS[k], rows[k].max(4), pages, None);
        }
        for (name, len) in [
            ("force", v4),
            ("moment", v4),
            ("pot", v4),
            ("hash", 4 * n),
            ("slot", 4 * n),
            ("sorted_tmp", 4 * n),
            ("sorted_cell", 16 * n),
            ("sorted_pos", v4),
            ("step_next", 16),
            ("zeros", 16),
            ("nbr_count", 4 * n),
            ("red_a", NQ * rs * records),
            ("red_b", NQ * rs * records1),
            ("watch_a", NW * rs * watch_records),
            ("watch_b", NW * rs * watch_records1),
            ("watch", watch_gpu_size(precision) * replicas),
            ("watch_flags", 4 * replicas),
            ("drift", 4 * rs * replicas),
            ("pos_backup", v4),
            ("vel_backup", v4),
            ("quat_backup", v4),
            ("omega_backup", v4),
            (CELL.1, blocks),
            ("break_at", 4 * rs * nr_records),
            ("break_id", 16 * nr_records),
        ] {
            self.add_whole(name, len, Fill::Zeros, STORAGE);
        }
        self.add_paged("bond_out", bond_out_elem(precision), shape.bond_pages, None);
        self.add_paged("nbr", 4, shape.nbr_pages, None);
        // Broken flags, a bit per bond, bound whole (`BatchLayout::broken_word`).
        let flags = if shape.layout.rupture.iter().any(|&r| r) { 4 * shape.layout.broken_words as usize } else { 0 };
        self.add_whole(BROKEN.0, flags, Fill::Zeros, STORAGE);
        self.add_whole(BROKEN.1, flags, Fill::Zeros, STORAGE);
    }

    /// The scan levels' block totals and uniforms, the reduction levels' uniforms and the
    /// readback buffer.
    fn levels(&mut self, shape: &Shape, precision: Precision) {
        for &len in shape.scan_lens.iter().skip(1) {
            let k = self.add("scan_aux", 4 * len, Fill::Zeros, STORAGE);
            self.scan_aux.push(k);
        }
        self.scan_top = self.add("scan_top_sum", 16, Fill::Zeros, STORAGE);
        for &len in &shape.scan_lens {
            let bytes = words(&[len as u32, 0, 0, 0]);
            let k = self.add("scan_len", bytes.len(), Fill::Bytes(bytes), UNIFORM);
            self.scan_len.push(k);
        }
        // Reductions: level 0 writes `records` partial records into red_a; each further level
        // reduces them as its chunk table says, ping-ponging between red_a and red_b. One
        // uniform per level: (workgroups, offset of the level's entries in red_table).
        let mut offset = 0usize;
        for len in std::iter::once(shape.table0.len()).chain(shape.table_levels.iter().map(|t| t.len())) {
            let bytes = words(&[len as u32, offset as u32, 0, 0]);
            let k = self.add("red_len", bytes.len(), Fill::Bytes(bytes), UNIFORM);
            self.red_len.push((len, k));
            offset += len;
        }
        let mut offset = 0usize;
        for len in std::iter::once(shape.watch0.len()).chain(shape.watch_levels.iter().map(|t| t.len())) {
            let bytes = words(&[len as u32, offset as u32, 0, 0]);
            let k = self.add("watch_len", bytes.len(), Fill::Bytes(bytes), UNIFORM);
            self.watch_len.push((len, k));
            offset += len;
        }
        let rs = real_size(precision);
        let status = 4 * shape.status.len();
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        // Status words, one diagnostics record and one watch (with its flags) per replica.
        let r = shape.layout.replicas();
        let len = status + r * (NQ * rs + watch_gpu_size(precision) + 4);
        self.readback = self.add("readback", len, Fill::Zeros, usage);
    }

    /// Bytes of every planned buffer.
    pub fn total(&self) -> u64 {
        self.items.iter().map(|i| i.1).sum()
    }

    /// Allocates every planned buffer through the fallible path and uploads the contents, each
    /// made just before its upload. `budget` caps the sum of the sizes; `n` scales the "how
    /// many particles fit" estimate.
    pub fn allocate(
        self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        budget: Option<u64>,
        n: u64,
    ) -> Result<Allocated, GpuError> {
        let bytes = self.total();
        let mut all: Vec<Option<wgpu::Buffer>> =
            allocate(self.items, device, queue, budget, n)?.into_iter().map(Some).collect();
        let mut take = |k: usize| all[k].take().ok_or_else(|| GpuError::Wgpu("buffer planned twice".into()));
        let mut buffers = HashMap::new();
        for (name, k) in self.whole_at {
            buffers.insert(name, take(k)?);
        }
        let mut paged = HashMap::new();
        for (name, elem, pages, ids) in self.paged_at {
            let buffers = ids.into_iter().map(&mut take).collect::<Result<Vec<_>, _>>()?;
            paged.insert(name, Paged { pages, elem, buffers });
        }
        let scan_aux = self.scan_aux.into_iter().map(&mut take).collect::<Result<_, _>>()?;
        let scan_top = take(self.scan_top)?;
        let scan_len = self.scan_len.into_iter().map(&mut take).collect::<Result<_, _>>()?;
        let red_len = self.red_len.into_iter().map(|(c, k)| Ok((c, take(k)?))).collect::<Result<_, GpuError>>()?;
        let watch_len = self.watch_len.into_iter().map(|(c, k)| Ok((c, take(k)?))).collect::<Result<_, GpuError>>()?;
        let readback = take(self.readback)?;
        Ok(Allocated { buffers, paged, scan_aux, scan_top, scan_len, red_len, watch_len, readback, bytes })
    }
}

/// Allocates `items` in order and uploads their contents (see `Planned::allocate`).
fn allocate<'a>(
    items: Vec<(&'static str, u64, wgpu::BufferUsages, Fill<'a>)>,
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    budget: Option<u64>,
    n: u64,
) -> Result<Vec<wgpu::Buffer>, GpuError> {
    let total: u64 = items.iter().map(|i| i.1).sum();
    let fit = |available: u64| (n as u128 * available as u128 / total.max(1) as u128) as u64;
    let mut allocated = 0u64;
    let mut pending = 0usize;
    let mut out = Vec::with_capacity(items.len());
    for (name, size, usage, fill) in items {
        if let Some(b) = budget.filter(|&b| allocated + size > b) {
            return Err(GpuError::OutOfMemory {
                what: name,
                bytes: size,
                allocated,
                total,
                max_particles: fit(b),
                message: format!("the engine's memory budget is {b} bytes"),
            });
        }
        let buffer = match create_buffer(device, name, size, usage) {
            Ok(b) => b,
            Err(BufferFailure::OutOfMemory(message)) => {
                // What was allocated before is what the device had room for (a lower bound).
                return Err(GpuError::OutOfMemory {
                    what: name,
                    bytes: size,
                    allocated,
                    total,
                    max_particles: fit(allocated),
                    message,
                });
            }
            Err(BufferFailure::Other(e)) => {
                return Err(GpuError::Wgpu(format!("creating buffer `{name}` ({size} bytes): {e}")));
            }
        };
        let data = match fill {
            Fill::Zeros => Vec::new(),
            Fill::Bytes(d) => d,
            Fill::Make(make) => make(),
        };
        for (k, slice) in data.chunks(UPLOAD_FLUSH).enumerate() {
            queue.write_buffer(&buffer, (k * UPLOAD_FLUSH) as u64, slice);
            pending += slice.len();
            if pending >= UPLOAD_FLUSH {
                queue.submit([]);
                device
                    .poll(wgpu::PollType::wait_indefinitely())
                    .map_err(|e| GpuError::Wgpu(format!("uploading the state: {e}")))?;
                pending = 0;
            }
        }
        drop(data);
        allocated += size;
        out.push(buffer);
    }
    Ok(out)
}

/// Wall slots per particle of the wall history: the most walls of any replica.
pub(crate) fn wall_slots(models: &[&Model]) -> u32 {
    models.iter().map(|m| m.params.walls.len()).max().unwrap_or(0) as u32
}

/// The bonded pairs' tangential history beside the incidence (shaders/bindings.wgsl `inc_xi`)
/// and its backup.
pub(super) const BOND_HISTORY: [&str; 2] = ["inc_xi", "inc_xi_backup"];

/// The backups of `HISTORY_ARRAYS`, in their order.
pub(super) const HISTORY_BACKUPS: [&str; 4] =
    ["hist_count_backup", "hist_key_backup", "hist_xi_backup", "whist_backup"];

/// u32 words as bytes.
fn words(v: &[u32]) -> Vec<u8> {
    bytemuck::cast_slice::<u32, u8>(v).to_vec()
}

/// A particle's position offset (xyz, inside its block) and radius (w).
fn position(m: &Model, frame: &Frame, i: usize) -> [f64; 4] {
    let (_, o) = frame.split(m.particles.x[i]);
    [o.x, o.y, o.z, m.particles.radius[i]]
}

/// A per-particle vec4 array of reals, `f(model, frame, i)` for each particle, made when its
/// buffer is allocated.
fn vec4<'a>(s: StateInputs<'a>, precision: Precision, f: fn(&Model, &Frame, usize) -> [f64; 4]) -> Fill<'a> {
    let (models, frames) = (s.models, s.frames);
    let rs = real_size(precision);
    Fill::Make(Box::new(move || {
        particle_bytes(models, 4 * rs, |r, i, out| push_reals(out, &f(models[r], &frames[r], i), precision))
    }))
}

/// Appends a position block as the device reads it (`cell`, `CELL_BYTES`: i32 x, y, z, 0).
fn push_block(out: &mut Vec<u8>, b: [i32; 3]) {
    for c in [b[0], b[1], b[2], 0] {
        out.extend_from_slice(&c.to_ne_bytes());
    }
}

/// A per-particle array over the batch, `elem` bytes per particle: `f(r, i, out)` appends
/// particle i of replica r.
fn particle_bytes(models: &[&Model], elem: usize, f: impl Fn(usize, usize, &mut Vec<u8>)) -> Vec<u8> {
    let n: usize = models.iter().map(|m| m.particles.len()).sum();
    let mut out = Vec::with_capacity(n * elem);
    for (r, m) in models.iter().enumerate() {
        for i in 0..m.particles.len() {
            f(r, i, &mut out);
        }
    }
    debug_assert_eq!(out.len(), n * elem);
    out
}

/// Bonds `range` of the batch (replica r's start at `b_start[r]`) of a per-bond array, `elem`
/// bytes per bond: `f(r, bond, out)` appends one.
fn bond_bytes(
    models: &[&Model],
    b_start: &[u32],
    range: Range<u64>,
    elem: usize,
    f: impl Fn(usize, &Bond, &mut Vec<u8>),
) -> Vec<u8> {
    let mut out = Vec::with_capacity((range.end - range.start) as usize * elem);
    for (r, m) in models.iter().enumerate() {
        let b0 = b_start[r] as u64;
        let (lo, hi) = (range.start.max(b0), range.end.min(b0 + m.bonds.len() as u64));
        for k in lo..hi {
            f(r, &m.bonds[(k - b0) as usize], &mut out);
        }
    }
    debug_assert_eq!(out.len() as u64, (range.end - range.start) * elem as u64);
    out
}

//! The GPU engine's tuning options: limits lowered for tests, and switches for comparisons.

/// Tuning options of `GpuEngine::with_options` and `GpuEngine::new_batch`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuOptions {
    /// Caps the workgroups per dispatch dimension below the adapter's limit, so that the 2-D
    /// folding of large dispatches can be exercised on small systems.
    pub max_workgroups_per_dimension: Option<u32>,
    /// Caps the bytes per buffer binding below the adapter's limit (tests of the size check).
    pub max_binding_size: Option<u64>,
    /// Caps the bytes of each buffer ("page") the chunked arrays are stored in below the
    /// adapter's buffer limit, so that their paging (`gpu::chunks::Pages`) can be exercised on
    /// small systems. The arrays bound whole are not affected.
    pub page_size: Option<u64>,
    /// Initial capacity of each neighbour list (tests use a tiny one to exercise overflows).
    pub nbr_capacity: Option<u32>,
    /// Caps the bytes of device memory the state's buffers may take (beyond it, allocation fails
    /// as if the device were out of memory): leaves room for other work on a shared device, and
    /// lets tests exercise the out-of-memory report.
    pub memory_budget: Option<u64>,
    /// Counts positions from the coordinate origin instead of the centre of each replica's
    /// bounding box, so that a model far from the origin is stored far out in blocks (tests of
    /// the position frames, `gpu::frame`).
    pub origin_at_zero: bool,
    /// Opens a device of its own instead of taking one from the process-wide cache (see
    /// `cache`), and closes it when the engine is dropped: for comparisons with a fresh device.
    pub fresh_device: bool,
    /// Caps the break records one batch of steps holds below `MAX_BREAK_RECORDS` (tests of
    /// the overflow, after which the advance is taken again in shorter batches).
    pub max_break_records: Option<u64>,
    /// Keeps bonded pairs in the contact lists (as before they were left out,
    /// `grid::BondedPartners`): the same contacts in the same order, so the same results
    /// bit for bit. For comparisons and measurements.
    pub list_bonded_pairs: bool,
    /// Records the grid stage in every step and rebuilds only where the skin rule requires
    /// it, as before batches left the grid out of quiet steps (docs/GPU.md, "Quiet steps"):
    /// the same results bit for bit. For comparisons and measurements.
    pub grid_every_step: bool,
    /// Stores every bond's reference direction, length and attitudes per bond even where the
    /// particles' reference state gives them (`Model::reference_positions`,
    /// `reference_attitudes`): the bond kernel then reads them in bond order instead of
    /// gathering them from both ends. The same values, so in f64 the same bits. For
    /// measurements of the bond kernel (bench `+bond-refs`).
    pub per_bond_references: bool,
}

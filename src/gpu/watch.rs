//! The host side of the device's watch (shaders/watch.wgsl): the `WatchGpu` mirror of one
//! replica's watch, written from the run's `Watch` at the start of a batch and taken back into it
//! at the end (`WatchRead::merge`), with the batch's steps turned into the run's.

use super::shader::{STATUS_NONE, WATCH_CONTACTED, WATCH_IN_CONTACT, WATCH_ON, WATCH_SEPARATED};
use crate::engine::{Precision, Watch};
use glam::DVec3;

macro_rules! watch_gpu {
    ($name:ident, $real:ty, $size:expr) => {
        /// Mirrors WGSL `WatchGpu` (shaders/watch.wgsl) for this precision.
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
        pub struct $name {
            pub e0: $real,
            pub limit: $real,
            pub scale: $real,
            pub max_dev: $real,
            pub released: $real,
            pub peak: $real,
            pub vn_sep: $real,
            pub mass: $real,
            pub normal: [$real; 4],
            pub max_step: u32,
            pub first: u32,
            pub last: u32,
            pub peak_step: u32,
            pub sep_step: u32,
            pub trip_step: u32,
            pub episodes: u32,
            pub observed: u32,
        }

        const _: () = assert!(std::mem::size_of::<$name>() == $size);

        impl $name {
            fn from_start(s: &WatchStart<'_>) -> $name {
                let (e, i) = (&s.watch.energy, &s.watch.impact);
                let n = i.normal.unwrap_or(DVec3::ZERO);
                $name {
                    e0: (e.e0 + s.gravity_shift) as $real,
                    // An infinite limit stays infinite in f32 (a limit above f32::MAX too).
                    limit: e.limit as $real,
                    scale: e.scale as $real,
                    max_dev: e.max_deviation as $real,
                    released: s.released as $real,
                    peak: i.peak_force as $real,
                    vn_sep: 0.0,
                    mass: s.mass as $real,
                    normal: [n.x as $real, n.y as $real, n.z as $real, 0.0],
                    max_step: STATUS_NONE,
                    first: STATUS_NONE,
                    last: STATUS_NONE,
                    peak_step: STATUS_NONE,
                    sep_step: STATUS_NONE,
                    trip_step: STATUS_NONE,
                    episodes: 0,
                    observed: 0,
                }
            }

            fn read(&self) -> WatchRead {
                let step = |s: u32| (s != STATUS_NONE).then_some(s);
                WatchRead {
                    scale: self.scale as f64,
                    max_dev: self.max_dev as f64,
                    max_step: step(self.max_step),
                    peak: self.peak as f64,
                    vn_sep: self.vn_sep as f64,
                    normal: DVec3::new(self.normal[0] as f64, self.normal[1] as f64, self.normal[2] as f64),
                    trip_dev: self.normal[3] as f64,
                    first: step(self.first),
                    last: step(self.last),
                    peak_step: step(self.peak_step),
                    sep_step: step(self.sep_step),
                    trip_step: step(self.trip_step),
                    episodes: self.episodes as u64,
                    observed: self.observed as u64,
                }
            }
        }
    };
}

// Eight reals, a vec4 of reals, eight u32: 80 B in f32, 128 B in f64 (multiples of the vec4's
// 16- / 32-byte alignment, so the array stride is the size).
watch_gpu!(WatchGpu32, f32, 80);
watch_gpu!(WatchGpu64, f64, 128);

/// Bytes of one `WatchGpu` in a precision.
pub fn watch_gpu_size(precision: Precision) -> usize {
    match precision {
        Precision::F32 => std::mem::size_of::<WatchGpu32>(),
        Precision::F64 => std::mem::size_of::<WatchGpu64>(),
    }
}

/// What one replica's device watch starts a batch from: the run's watch, its bond energy
/// released so far and its mass.
pub struct WatchStart<'a> {
    pub watch: &'a Watch,
    pub released: f64,
    pub mass: f64,
    /// What the device's gravity energy exceeds the model's by: `M g·o` for a frame whose
    /// origin `o` is not zero (f32 far from the origin, src/gpu/frame.rs), as `read_diagnostics`
    /// corrects the other way. The device compares its sums with `e0 + shift` (computed here in
    /// f64, so that an f32 watch holds a small number, not two large ones that cancel).
    pub gravity_shift: f64,
}

impl WatchStart<'_> {
    /// The `WatchGpu` bytes and the flags word.
    pub fn bytes(&self, precision: Precision) -> (Vec<u8>, u32) {
        let i = &self.watch.impact;
        let mut flags = WATCH_ON;
        if i.normal.is_some() {
            flags |= WATCH_CONTACTED;
        }
        if i.in_contact {
            flags |= WATCH_IN_CONTACT;
        }
        if i.separated.is_some() {
            flags |= WATCH_SEPARATED;
        }
        let bytes = match precision {
            Precision::F32 => bytemuck::bytes_of(&WatchGpu32::from_start(self)).to_vec(),
            Precision::F64 => bytemuck::bytes_of(&WatchGpu64::from_start(self)).to_vec(),
        };
        (bytes, flags)
    }
}

/// One replica's device watch at the end of a batch, in f64; steps are batch steps.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchRead {
    pub scale: f64,
    pub max_dev: f64,
    pub max_step: Option<u32>,
    pub peak: f64,
    pub vn_sep: f64,
    pub normal: DVec3,
    pub trip_dev: f64,
    pub first: Option<u32>,
    pub last: Option<u32>,
    pub peak_step: Option<u32>,
    pub sep_step: Option<u32>,
    pub trip_step: Option<u32>,
    pub episodes: u64,
    pub observed: u64,
}

impl WatchRead {
    /// Decodes one `WatchGpu`.
    pub fn decode(bytes: &[u8], precision: Precision) -> WatchRead {
        match precision {
            Precision::F32 => bytemuck::pod_read_unaligned::<WatchGpu32>(bytes).read(),
            Precision::F64 => bytemuck::pod_read_unaligned::<WatchGpu64>(bytes).read(),
        }
    }

    /// Takes the batch into the run's watch: `start` is the replica's step at the start of the
    /// batch (batch step s is the run's step start + s + 1: the evaluation of batch step s ends
    /// that step), `flags` the replica's flags word at the end. Returns the run's step the guard
    /// refused and the deviation there, if it refused one.
    pub fn merge(&self, w: &mut Watch, flags: u32, start: u64) -> Option<(u64, f64)> {
        let run = |s: u32| start + s as u64 + 1;
        let (e, i) = (&mut w.energy, &mut w.impact);
        e.scale = self.scale;
        if let Some(s) = self.max_step {
            e.max_deviation = self.max_dev;
            e.max_step = run(s);
        }
        e.observed += self.observed;
        i.observed += self.observed;
        if let (Some(s), None) = (self.first, i.first_contact_step) {
            i.first_contact_step = Some(run(s));
            i.normal = Some(self.normal);
        }
        if let Some(s) = self.last {
            i.last_contact_step = Some(run(s));
        }
        if let Some(s) = self.peak_step {
            i.peak_force = self.peak;
            i.peak_step = Some(run(s));
        }
        i.episodes += self.episodes;
        i.in_contact = flags & WATCH_IN_CONTACT != 0;
        i.separated = match (flags & WATCH_SEPARATED != 0, self.sep_step) {
            (false, _) => None,
            (true, Some(s)) => Some((run(s), self.vn_sep)),
            (true, None) => i.separated,
        };
        self.trip_step.map(|s| (run(s), self.trip_dev))
    }
}

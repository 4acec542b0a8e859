//! The CPU engine's constants per particle and per bond: a column stored once when every
//! particle has the same bits, the bonds' reference attitudes, and each bond's ends and
//! reference direction and length.

use crate::grid::PAR_MIN;
use crate::model::Model;
use glam::{DQuat, DVec3};
use rayon::prelude::*;

/// Exact equality (bit patterns), so that a value stored once is the value every item had.
pub(super) trait SameBits {
    fn same_bits(&self, other: &Self) -> bool;
}

impl SameBits for f64 {
    fn same_bits(&self, other: &Self) -> bool {
        self.to_bits() == other.to_bits()
    }
}

impl SameBits for bool {
    fn same_bits(&self, other: &Self) -> bool {
        self == other
    }
}

impl SameBits for DQuat {
    fn same_bits(&self, other: &Self) -> bool {
        self.to_array().iter().zip(other.to_array()).all(|(a, b)| a.to_bits() == b.to_bits())
    }
}

/// A per-particle constant, stored once when every particle has the same bits (the common
/// case: uniform spheres, identity reference attitudes).
#[derive(Clone, Debug)]
pub(super) enum Column<T> {
    Uniform(T),
    Each(Vec<T>),
}

impl<T: Copy + SameBits + Send + Sync> Column<T> {
    pub(super) fn new(values: &[T], fallback: T) -> Column<T> {
        let first = values.first().copied().unwrap_or(fallback);
        let uniform = if values.len() < PAR_MIN {
            values.iter().all(|v| v.same_bits(&first))
        } else {
            values.par_iter().all(|v| v.same_bits(&first))
        };
        if uniform { Column::Uniform(first) } else { Column::Each(values.to_vec()) }
    }

    #[inline(always)]
    pub(super) fn get(&self, i: usize) -> T {
        match self {
            Column::Uniform(v) => *v,
            Column::Each(v) => v[i],
        }
    }

    pub(super) fn bytes(&self) -> usize {
        match self {
            Column::Uniform(_) => 0,
            Column::Each(v) => v.capacity() * size_of::<T>(),
        }
    }
}

/// The reference attitudes of the bonds' ends: per particle when the bonds agree on each
/// particle's (`Model::reference_attitudes`: always for a model built from its initial state,
/// and for a checkpoint's), per bond otherwise.
#[derive(Clone, Debug)]
pub(super) enum RefAttitudes {
    Particle(Column<DQuat>),
    Bond(Vec<[DQuat; 2]>),
}

impl RefAttitudes {
    pub(super) fn new(model: &Model) -> RefAttitudes {
        match model.reference_attitudes() {
            Some(q) => RefAttitudes::Particle(Column::new(&q, DQuat::IDENTITY)),
            None => RefAttitudes::Bond(model.bonds.par_iter().map(|b| [b.q_i0, b.q_j0]).collect()),
        }
    }

    /// Whether every reference attitude is exactly the identity (then `q q0⁻¹` is `q` up to the
    /// sign of zero components, which no result depends on: bond results only enter sums that
    /// start at +0, squares, lengths, and `atan2` of a length).
    pub(super) fn is_identity(&self) -> bool {
        matches!(self, RefAttitudes::Particle(Column::Uniform(q)) if q.same_bits(&DQuat::IDENTITY))
    }

    #[inline(always)]
    pub(super) fn get(&self, k: usize, b: &BondRef) -> (DQuat, DQuat) {
        match self {
            RefAttitudes::Particle(c) => (c.get(b.i as usize), c.get(b.j as usize)),
            RefAttitudes::Bond(v) => (v[k][0], v[k][1]),
        }
    }

    pub(super) fn bytes(&self) -> usize {
        match self {
            RefAttitudes::Particle(c) => c.bytes(),
            RefAttitudes::Bond(v) => v.capacity() * size_of::<[DQuat; 2]>(),
        }
    }
}

/// A bond's ends and reference direction and length (its reference attitudes are in
/// `RefAttitudes`): 40 bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct BondRef {
    pub(super) i: u32,
    pub(super) j: u32,
    pub(super) dhat0: DVec3,
    pub(super) l0: f64,
}

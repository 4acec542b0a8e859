//! The solid shapes a lattice fills, in their local frame (centre at the origin, torus axis or
//! box edges along the local axes): which sphere centres they keep, how deep a point lies, and
//! the row intervals the lattice enumerates.

use glam::DVec3;
use std::f64::consts::PI;

/// A solid body's shape in its local frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Region {
    /// Torus about the local z axis: centreline radius `r_major` (D_t/2), tube radius `r_tube`
    /// (D_c/2).
    Torus { r_major: f64, r_tube: f64 },
    /// Box `[-h, h]` per axis (`half` = size/2).
    Block { half: DVec3 },
}

impl Region {
    pub fn torus(dt: f64, dc: f64) -> Region {
        Region::Torus { r_major: 0.5 * dt, r_tube: 0.5 * dc }
    }

    pub fn block(size: DVec3) -> Region {
        Region::Block { half: 0.5 * size }
    }

    /// Distance of `p` from the centreline circle (torus only; 0 for a box).
    #[inline]
    fn centreline_distance(r_major: f64, p: DVec3) -> f64 {
        let rho = (p.x * p.x + p.y * p.y).sqrt();
        ((rho - r_major) * (rho - r_major) + p.z * p.z).sqrt()
    }

    /// A site is kept when its whole sphere of diameter `dp` lies in the body (MODEL §7: for the
    /// torus, distance from the centreline circle `≤ (D_c − D_p)/2`).
    #[inline]
    pub fn keeps_site(&self, dp: f64, p: DVec3) -> bool {
        match *self {
            Region::Torus { r_major, r_tube } => Self::centreline_distance(r_major, p) <= r_tube - 0.5 * dp,
            Region::Block { half } => {
                let a = half - DVec3::splat(0.5 * dp);
                p.x.abs() <= a.x && p.y.abs() <= a.y && p.z.abs() <= a.z
            }
        }
    }

    /// Distance of `p` from the surface, positive inside. A sphere of radius r lies inside when
    /// `depth ≥ r`.
    #[inline]
    pub fn depth(&self, p: DVec3) -> f64 {
        match *self {
            Region::Torus { r_major, r_tube } => r_tube - Self::centreline_distance(r_major, p),
            Region::Block { half } => (half - p.abs()).min_element(),
        }
    }

    /// Volume of the body.
    pub fn volume(&self) -> f64 {
        match *self {
            Region::Torus { r_major, r_tube } => 2.0 * PI * PI * r_major * r_tube * r_tube,
            Region::Block { half } => 8.0 * half.x * half.y * half.z,
        }
    }

    /// Volume the centres of spheres of diameter `dp` may occupy (MODEL §7's estimate is the
    /// site density times this).
    pub fn centre_volume(&self, dp: f64) -> f64 {
        match *self {
            Region::Torus { r_major, r_tube } => {
                let a = (r_tube - 0.5 * dp).max(0.0);
                2.0 * PI * PI * r_major * a * a
            }
            Region::Block { half } => {
                let a = (half - DVec3::splat(0.5 * dp)).max(DVec3::ZERO);
                8.0 * a.x * a.y * a.z
            }
        }
    }

    /// Half-extent of the bounding box along local x and y (z is `z_half`), for the body.
    pub fn half_extent(&self) -> DVec3 {
        match *self {
            Region::Torus { r_major, r_tube } => DVec3::new(r_major + r_tube, r_major + r_tube, r_tube),
            Region::Block { half } => half,
        }
    }

    /// Largest |z| of a kept centre (negative: none).
    pub(crate) fn z_half(&self, dp: f64) -> f64 {
        match *self {
            Region::Torus { r_tube, .. } => r_tube - 0.5 * dp,
            Region::Block { half } => half.z - 0.5 * dp,
        }
    }

    /// Largest |y| of a kept centre in the plane z (None: the plane misses the region).
    pub(crate) fn y_half(&self, dp: f64, z: f64) -> Option<f64> {
        match *self {
            Region::Torus { r_major, r_tube } => {
                let a = r_tube - 0.5 * dp;
                let w2 = a * a - z * z;
                (w2 >= 0.0).then(|| r_major + w2.sqrt())
            }
            Region::Block { half } => (z.abs() <= half.z - 0.5 * dp).then_some(half.y - 0.5 * dp),
        }
    }

    /// The x intervals of kept centres on the line (y, z): one, or two for a line through the
    /// torus hole. Only candidates: the lattice widens them and applies `keeps_site`.
    pub(crate) fn x_intervals(&self, dp: f64, y: f64, z: f64) -> ([f64; 2], Option<[f64; 2]>) {
        match *self {
            Region::Torus { r_major, r_tube } => {
                let a = r_tube - 0.5 * dp;
                let w = (a * a - z * z).max(0.0).sqrt();
                let b = ((r_major + w) * (r_major + w) - y * y).max(0.0).sqrt();
                let inner = r_major - w;
                let c2 = if inner > 0.0 { inner * inner - y * y } else { -1.0 };
                if c2 <= 0.0 {
                    ([-b, b], None)
                } else {
                    let c = c2.sqrt();
                    ([-b, -c], Some([c, b]))
                }
            }
            Region::Block { half } => {
                let a = half.x - 0.5 * dp;
                ([-a, a], None)
            }
        }
    }
}

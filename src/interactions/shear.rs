//! Binder shear, U^s (paper eqs. 53–55), in the paper's literal form and in a frame-objective form.

use glam::{DQuat, DVec3};
use serde::{Deserialize, Serialize};

/// Which shear law a scenario uses (MODEL §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ShearVariant {
    /// The paper's eqs. (53)–(55) as printed: not frame-objective; conserves `S = Σ J Ω` but
    /// not the total angular momentum `L`.
    Paper,
    /// One term per end, `n_e = ΔR_e d̂0`: frame-objective, conserves `L`.
    #[default]
    Objective,
}

impl ShearVariant {
    pub fn as_str(self) -> &'static str {
        match self {
            ShearVariant::Paper => "paper",
            ShearVariant::Objective => "objective",
        }
    }
}

/// Shear result: energy, force on `i` (on `j`: `−f_i`), spatial moments on `i` and `j`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ShearOut {
    pub energy: f64,
    pub f_i: DVec3,
    pub m_i: DVec3,
    pub m_j: DVec3,
}

/// Shear term of a bond with `d = x_i − x_j` (`d̂ = d/L`), reference direction `d̂0` and rotations
/// since bonding `dq_i`, `dq_j`. With `P = I − d̂ d̂ᵀ`:
///
/// * `Paper`: `c = (ΔR_i d̂0)·(ΔR_j d̂)`, `U = ½ K^s (1 − c)²`,
///   `F_i = K^s (1 − c) P ΔR_jᵀ ΔR_i d̂0 / L`, `RM_i = K^s (1 − c) (ΔR_i d̂0) × (ΔR_j d̂) = −RM_j`.
/// * `Objective`: `n_e = ΔR_e d̂0`, `c_e = n_e·d̂` for `e ∈ {i, j}`,
///   `U = ¼ K^s [(1 − c_i)² + (1 − c_j)²]`, `F_i = Σ_e ½ K^s (1 − c_e) P n_e / L`,
///   `RM_e = ½ K^s (1 − c_e) n_e × d̂` on end `e` only.
#[inline(always)]
pub fn shear(variant: ShearVariant, d: DVec3, dhat0: DVec3, dq_i: DQuat, dq_j: DQuat, k_shear: f64) -> ShearOut {
    let l = d.length();
    let dhat = d / l;
    let n_i = dq_i * dhat0;
    let project = |a: DVec3| a - dhat * dhat.dot(a);
    match variant {
        ShearVariant::Paper => {
            let b = dq_j * dhat;
            let c = n_i.dot(b);
            let g = 1.0 - c;
            let m_i = k_shear * g * n_i.cross(b);
            ShearOut {
                energy: 0.5 * k_shear * g * g,
                f_i: project(dq_j.conjugate() * n_i) * (k_shear * g / l),
                m_i,
                m_j: -m_i,
            }
        }
        ShearVariant::Objective => {
            let n_j = dq_j * dhat0;
            let g_i = 1.0 - n_i.dot(dhat);
            let g_j = 1.0 - n_j.dot(dhat);
            let h = 0.5 * k_shear;
            ShearOut {
                energy: 0.5 * h * (g_i * g_i + g_j * g_j),
                f_i: project(n_i * g_i + n_j * g_j) * (h / l),
                m_i: h * g_i * n_i.cross(dhat),
                m_j: h * g_j * n_j.cross(dhat),
            }
        }
    }
}

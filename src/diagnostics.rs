//! Diagnostics of MODEL §4: the energy budget and the momenta, and which of them the model
//! conserves exactly.

use crate::interactions::ShearVariant;
use crate::model::Model;
use glam::DVec3;
use serde::{Deserialize, Serialize};

/// Energy components and momenta at one step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Diagnostics {
    pub step: u64,
    pub t: f64,
    /// Translational kinetic energy `Σ ½ m |v|²`.
    pub e_trans: f64,
    /// Rotational kinetic energy `Σ ½ J |Ω|²`.
    pub e_rot: f64,
    pub u_bend: f64,
    pub u_axial: f64,
    pub u_shear: f64,
    /// Particle–particle contact energy (each pair once).
    pub u_contact: f64,
    pub u_wall: f64,
    /// Uniform gravity, the pendulum's potential and mutual gravitation (MODEL §12).
    pub u_gravity: f64,
    /// Linear momentum `P = Σ m v`.
    pub p: DVec3,
    /// Spin `S = Σ J Ω`.
    pub s: DVec3,
    /// Angular momentum about the origin `L = Σ x × m v + S`.
    pub l: DVec3,
    /// Bond energy released by ruptures so far (cumulative); `E + E_released + E_dissipated` is
    /// bounded.
    pub e_released: f64,
    /// Bonds broken so far.
    pub n_broken: u64,
    /// Work done against the dissipative loads so far (MODEL §10 ledger; cumulative, 0 without
    /// damping and friction); `E + E_released + E_dissipated` is what stays bounded.
    #[serde(default)]
    pub e_dissipated: f64,
    /// Total force of the walls on the particles (MODEL §9).
    pub f_wall: DVec3,
    /// Centre of mass `Σ m x / Σ m` and its velocity `P / Σ m`.
    pub x_cm: DVec3,
    pub v_cm: DVec3,
}

/// Header of `series.csv`: the diagnostics (`Diagnostics::csv_row`), then the energy guard's
/// scale at that step (`E_scale`, `crate::guard`), then the fragments (`crate::fragments::Counts`),
/// then `E_dissipated` (MODEL §10; each version added its columns last).
pub const SERIES_HEADER: &str = "step,t,E,E_trans,E_rot,U_bend,U_axial,U_shear,U_contact,U_wall,U_gravity,P_x,P_y,P_z,\
     S_x,S_y,S_z,L_x,L_y,L_z,E_released,n_broken,F_wall_x,F_wall_y,F_wall_z,x_cm,y_cm,z_cm,v_cm_x,v_cm_y,v_cm_z,E_scale,\
     n_fragments,largest_fragment_fraction,debris_fraction,E_dissipated";

/// Header of a `series.csv` written before `E_dissipated` (a run resumed from such a folder goes
/// on writing rows without it).
pub const FRAGMENT_SERIES_HEADER: &str = "step,t,E,E_trans,E_rot,U_bend,U_axial,U_shear,U_contact,U_wall,U_gravity,\
     P_x,P_y,P_z,S_x,S_y,S_z,L_x,L_y,L_z,E_released,n_broken,F_wall_x,F_wall_y,F_wall_z,x_cm,y_cm,z_cm,v_cm_x,v_cm_y,\
     v_cm_z,E_scale,n_fragments,largest_fragment_fraction,debris_fraction";

/// Header of a `series.csv` written before the fragment columns (a run resumed from such a folder
/// goes on writing rows without them).
pub const SCALE_SERIES_HEADER: &str = "step,t,E,E_trans,E_rot,U_bend,U_axial,U_shear,U_contact,U_wall,U_gravity,P_x,\
     P_y,P_z,S_x,S_y,S_z,L_x,L_y,L_z,E_released,n_broken,F_wall_x,F_wall_y,F_wall_z,x_cm,y_cm,z_cm,v_cm_x,v_cm_y,v_cm_z,\
     E_scale";

/// Header of a `series.csv` written before `E_scale` (a run resumed from such a folder goes on
/// writing rows without it).
pub const LEGACY_SERIES_HEADER: &str = "step,t,E,E_trans,E_rot,U_bend,U_axial,U_shear,U_contact,U_wall,U_gravity,P_x,\
     P_y,P_z,S_x,S_y,S_z,L_x,L_y,L_z,E_released,n_broken,F_wall_x,F_wall_y,F_wall_z,x_cm,y_cm,z_cm,v_cm_x,v_cm_y,v_cm_z";

/// Formats a number with 17 significant digits (round-trips f64 exactly).
pub fn fmt17(v: f64) -> String {
    format!("{v:.16e}")
}

impl Diagnostics {
    /// What the energy guard watches: `E + E_released + E_dissipated` (MODEL §6, §10).
    pub fn budget_total(&self) -> f64 {
        self.total() + self.e_released + self.e_dissipated
    }

    /// Total mechanical energy `E` (without what ruptures released).
    pub fn total(&self) -> f64 {
        self.e_trans
            + self.e_rot
            + self.u_bend
            + self.u_axial
            + self.u_shear
            + self.u_contact
            + self.u_wall
            + self.u_gravity
    }

    /// The energy components in `series.csv` order (without the total).
    pub fn components(&self) -> [f64; 8] {
        [self.e_trans, self.e_rot, self.u_bend, self.u_axial, self.u_shear, self.u_contact, self.u_wall, self.u_gravity]
    }

    /// One `series.csv` row.
    pub fn csv_row(&self) -> String {
        let mut row = format!("{},{},{}", self.step, fmt17(self.t), fmt17(self.total()));
        let vecs = [self.p, self.s, self.l];
        for v in self.components().into_iter().chain(vecs.iter().flat_map(|v| v.to_array())).chain([self.e_released]) {
            row.push(',');
            row.push_str(&fmt17(v));
        }
        row.push_str(&format!(",{}", self.n_broken));
        for v in [self.f_wall, self.x_cm, self.v_cm].iter().flat_map(|v| v.to_array()) {
            row.push(',');
            row.push_str(&fmt17(v));
        }
        row
    }
}

/// Orthonormal bases of the directions along which P, S and L are conserved exactly (MODEL §4).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Conserved {
    pub p: Vec<DVec3>,
    pub s: Vec<DVec3>,
    pub l: Vec<DVec3>,
}

impl Conserved {
    pub fn for_model(model: &Model) -> Conserved {
        let prm = &model.params;
        if model.particles.fixed.iter().any(|&f| f) {
            // A fixed particle absorbs momentum: no exact balance holds.
            return Conserved::default();
        }
        let all = vec![DVec3::X, DVec3::Y, DVec3::Z];
        let normals: Vec<DVec3> = prm.walls.iter().map(|w| w.normal).collect();
        let has_bonds = !model.bonds.is_empty();
        let gravity = prm.gravity != DVec3::ZERO;
        // P: the directions orthogonal to every wall normal and to gravity.
        let mut pushers = normals.clone();
        if gravity {
            pushers.push(prm.gravity.normalize());
        }
        // MODEL §10: dashpots act along the line of centres (pairs, walls' normals) or in equal
        // and opposite pairs (the binder's), so P and L keep their balances; friction at a wall
        // pushes along the wall (P) and its force at the contact point turns the body about the
        // wall's normal (L along it), and its moment on the sphere, −gap n × F_t, turns it about
        // axes in the wall's plane: S keeps only its components along the normals. Friction
        // between spheres and the binder's shear dashpot put moments on both ends that do not
        // cancel (they balance the forces' couple about the origin): S no longer holds.
        let diss = prm.dissipation.as_ref();
        let wall_friction = !normals.is_empty() && diss.is_some_and(|d| d.mu_wall > 0.0);
        let spin_friction = diss.is_some_and(|d| d.mu > 0.0 || (has_bonds && d.binder[1] != 0.0));
        let p = if wall_friction { vec![] } else { orthogonal_complement(&pushers) };
        // Torque-free directions of the pendulum field (its torque is orthogonal to `up`).
        let pend_dirs = prm.pendulum.map(|pd| vec![pd.up.normalize()]);
        // S: bending and paper shear exert opposite moments; objective shear does not. A clump
        // turns loads at its spheres into moments about its centre, and mutual gravitation
        // trades spin for orbital angular momentum (MODEL §12): only L holds then.
        let rigid = !model.clumps.is_empty() || prm.gravitation.is_some();
        let s = if rigid || spin_friction || (has_bonds && prm.k_shear != 0.0 && prm.shear == ShearVariant::Objective) {
            vec![]
        } else {
            let mut dirs = pend_dirs.clone().unwrap_or_else(|| all.clone());
            if wall_friction {
                for n in &normals {
                    dirs = intersect(&dirs, *n);
                }
            }
            dirs
        };
        // L: all interactions objective; walls only keep L along a common normal; gravity keeps
        // L along g (its torque x × m g is orthogonal to g).
        let l = if wall_friction || (has_bonds && prm.k_shear != 0.0 && prm.shear == ShearVariant::Paper) {
            vec![]
        } else {
            let mut dirs = pend_dirs.unwrap_or_else(|| all.clone());
            for n in &normals {
                dirs = intersect(&dirs, *n);
            }
            if gravity {
                dirs = intersect(&dirs, prm.gravity.normalize());
            }
            dirs
        };
        Conserved { p, s, l }
    }
}

/// Orthonormal basis of the directions orthogonal to every vector in `normals`.
fn orthogonal_complement(normals: &[DVec3]) -> Vec<DVec3> {
    let mut basis: Vec<DVec3> = Vec::new();
    for n in normals {
        let mut r = *n;
        for b in &basis {
            r -= *b * b.dot(r);
        }
        if r.length() > 1e-9 {
            basis.push(r.normalize());
        }
    }
    let mut out = Vec::new();
    for e in [DVec3::X, DVec3::Y, DVec3::Z] {
        let mut r = e;
        for b in basis.iter().chain(out.iter()) {
            r -= *b * b.dot(r);
        }
        if r.length() > 1e-6 {
            out.push(r.normalize());
        }
    }
    out
}

/// Restricts a span to the line along `n` (empty unless `n` lies in the span).
fn intersect(dirs: &[DVec3], n: DVec3) -> Vec<DVec3> {
    let proj: DVec3 = dirs.iter().map(|d| *d * d.dot(n)).sum();
    if (proj - n).length() < 1e-9 { vec![n] } else { vec![] }
}

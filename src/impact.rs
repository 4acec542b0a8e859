//! Impact measures of MODEL §9, taken from the recorded rows of a run with walls: contact
//! times, peak wall force, impact and rebound speed, restitution, broken fraction and the final
//! energy partition (`summary.json`'s `impact`). Resolved at the record cadence.

use crate::diagnostics::Diagnostics;
use crate::interactions::Wall;
use glam::DVec3;
use serde::{Deserialize, Serialize};

/// Running state over the recorded rows (kept in checkpoints).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ImpactTracker {
    v_cm0: Option<DVec3>,
    /// Normal of the first contacted wall.
    normal: Option<DVec3>,
    first_contact: Option<f64>,
    last_contact: Option<f64>,
    peak_force: f64,
    peak_time: f64,
    in_contact: bool,
    /// `v_cm` at the first record after the last contact.
    v_after: Option<DVec3>,
}

/// The `impact` object of `summary.json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Impact {
    /// Normal of the first contacted wall (the one most aligned with the wall force then).
    pub wall_normal: Option<DVec3>,
    /// Time of the first and the last record with a wall force.
    pub first_contact_t: Option<f64>,
    pub last_contact_t: Option<f64>,
    pub contact_duration: Option<f64>,
    /// Whether the body still touched a wall at the end of the run (then there is no rebound).
    pub in_contact_at_end: bool,
    pub peak_wall_force: f64,
    pub peak_wall_force_t: Option<f64>,
    /// `−v_cm(0)·n`.
    pub impact_speed: Option<f64>,
    /// `v_cm·n` at the first record after the last contact.
    pub rebound_speed: Option<f64>,
    /// Rebound over impact speed.
    pub restitution: Option<f64>,
    /// Broken bonds over all bonds (0 without bonds).
    pub broken_fraction: f64,
    /// Energy terms at the end over `|E0|`: E_trans, E_rot, U_bend, U_axial, U_shear,
    /// U_contact, U_wall, U_gravity, E_released.
    pub energy_partition: EnergyPartition,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EnergyPartition {
    pub e_trans: f64,
    pub e_rot: f64,
    pub u_bend: f64,
    pub u_axial: f64,
    pub u_shear: f64,
    pub u_contact: f64,
    pub u_wall: f64,
    pub u_gravity: f64,
    pub e_released: f64,
}

impl ImpactTracker {
    /// Takes one recorded row.
    pub fn record(&mut self, d: &Diagnostics, walls: &[Wall]) {
        if self.v_cm0.is_none() {
            self.v_cm0 = Some(d.v_cm);
        }
        let f = d.f_wall.length();
        if f > 0.0 {
            if self.first_contact.is_none() {
                self.first_contact = Some(d.t);
                self.normal = walls
                    .iter()
                    .map(|w| w.normal)
                    .max_by(|a, b| a.dot(d.f_wall).total_cmp(&b.dot(d.f_wall)))
                    .or(Some(d.f_wall / f));
            }
            self.last_contact = Some(d.t);
            if f > self.peak_force {
                self.peak_force = f;
                self.peak_time = d.t;
            }
            self.in_contact = true;
            self.v_after = None;
        } else if self.in_contact {
            self.in_contact = false;
            self.v_after = Some(d.v_cm);
        }
    }

    /// The measures at the end of the run (`last`: its final diagnostics).
    pub fn finish(&self, e0: f64, last: &Diagnostics, n_bonds: usize) -> Impact {
        let n = self.normal;
        let impact = n.zip(self.v_cm0).map(|(n, v)| -v.dot(n));
        let rebound = n.zip(self.v_after).map(|(n, v)| v.dot(n));
        let scale = if e0 != 0.0 { e0.abs() } else { 1.0 };
        let e = |v: f64| v / scale;
        Impact {
            wall_normal: n,
            first_contact_t: self.first_contact,
            last_contact_t: self.last_contact,
            contact_duration: self.first_contact.zip(self.last_contact).map(|(a, b)| b - a),
            in_contact_at_end: self.in_contact,
            peak_wall_force: self.peak_force,
            peak_wall_force_t: self.first_contact.map(|_| self.peak_time),
            impact_speed: impact,
            rebound_speed: rebound,
            restitution: impact.zip(rebound).filter(|(i, _)| *i != 0.0).map(|(i, r)| r / i),
            broken_fraction: if n_bonds > 0 { last.n_broken as f64 / n_bonds as f64 } else { 0.0 },
            energy_partition: EnergyPartition {
                e_trans: e(last.e_trans),
                e_rot: e(last.e_rot),
                u_bend: e(last.u_bend),
                u_axial: e(last.u_axial),
                u_shear: e(last.u_shear),
                u_contact: e(last.u_contact),
                u_wall: e(last.u_wall),
                u_gravity: e(last.u_gravity),
                e_released: e(last.e_released),
            },
        }
    }
}

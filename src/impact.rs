//! Impact measures of MODEL §9, watched at every step (`ImpactWatch`) so that they do not
//! depend on the record cadence: first and last contact, peak wall force, impact speed, and a
//! rebound speed and restitution only once the body has left the wall moving away
//! (`summary.json`'s `impact`).

use crate::diagnostics::Diagnostics;
use crate::interactions::Wall;
use glam::DVec3;
use serde::{Deserialize, Serialize};

/// An impact speed at most this fraction of the body's speed is round-off, not an impact: above
/// the centre of mass's velocity's own rounding (about √n ε, 10⁻¹² at 10⁸ particles) and below
/// any impact meant (a direction within 6·10⁻⁸ degrees of the wall's plane).
pub const IMPACT_ROUND_OFF: f64 = 1e-9;

/// What the impact watch reads of one step: the total wall force and the centre of mass's
/// velocity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WallAt {
    pub step: u64,
    pub f_wall: DVec3,
    pub v_cm: DVec3,
}

impl WallAt {
    pub fn of(d: &Diagnostics) -> WallAt {
        WallAt { step: d.step, f_wall: d.f_wall, v_cm: d.v_cm }
    }
}

/// Running state of the impact measures (kept in checkpoints). Field names and types of the
/// earlier record-cadence tracker are kept where they mean the same, so that older checkpoints
/// still load (`upgrade` converts their contact times).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ImpactWatch {
    /// `v_cm` at step 0.
    pub v_cm0: Option<DVec3>,
    /// Normal of the first contacted wall (the one most aligned with the wall force then).
    pub normal: Option<DVec3>,
    /// First and last step with a wall force.
    pub first_contact_step: Option<u64>,
    pub last_contact_step: Option<u64>,
    pub peak_force: f64,
    pub peak_step: Option<u64>,
    /// A wall force at the last observed step.
    pub in_contact: bool,
    /// After the last contact: the first step without a wall force at which the centre of mass
    /// moves away from the wall (`v_cm·n > 0`), and `v_cm·n` then.
    pub separated: Option<(u64, f64)>,
    /// Steps observed (every step where the engine watches its steps, else the driver's stops).
    pub observed: u64,
    /// Contact episodes so far: runs of steps with a wall force (a ring bounces on its
    /// particles many times before it leaves).
    pub episodes: u64,
    /// Contact times of a checkpoint written by the record-cadence tracker (read only).
    #[serde(rename = "first_contact", skip_serializing)]
    legacy_first: Option<f64>,
    #[serde(rename = "last_contact", skip_serializing)]
    legacy_last: Option<f64>,
    #[serde(rename = "peak_time", skip_serializing)]
    legacy_peak: Option<f64>,
}

/// The `impact` object of `summary.json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Impact {
    /// Normal of the first contacted wall (the one most aligned with the wall force then).
    pub wall_normal: Option<DVec3>,
    /// Time of the first and the last step with a wall force.
    pub first_contact_t: Option<f64>,
    pub last_contact_t: Option<f64>,
    pub contact_duration: Option<f64>,
    /// Whether the body still touched a wall at the end of the run.
    pub in_contact_at_end: bool,
    pub peak_wall_force: f64,
    pub peak_wall_force_t: Option<f64>,
    /// `−(v_cm(0) + g t_first)·n`: the centre of mass's speed towards the wall at the first
    /// contact step in free flight (`−v_cm(0)·n` without gravity; exact before any wall force
    /// where uniform gravity is the only load that moves the centre of mass in flight: no bond
    /// or contact to a fixed particle).
    pub impact_speed: Option<f64>,
    /// Whether the body left the wall after its last contact, moving away from it; only then
    /// are the rebound speed and the restitution given.
    pub separated: bool,
    /// When it left: the first step after the last contact without a wall force and with
    /// `v_cm·n > 0`.
    pub separation_t: Option<f64>,
    /// `v_cm·n` at that step.
    pub rebound_speed: Option<f64>,
    /// Time from the separation to the end of the run: a body whose shape still vibrates may
    /// touch again after a short free flight (the measures then move to its later departure).
    pub free_flight_t: Option<f64>,
    /// Runs of steps with a wall force (of the whole run).
    pub contact_episodes: u64,
    /// Rebound over impact speed.
    pub restitution: Option<f64>,
    /// Why there is no rebound speed, when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_rebound: Option<String>,
    /// Why there is a rebound speed but no restitution: the body did not move towards the wall
    /// when it first touched it (`impact_speed ≤ 0`: it started on the wall, or was pushed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_restitution: Option<String>,
    /// Steps the measures were taken at (every step, or the run driver's stops).
    pub steps_observed: u64,
    /// Broken bonds over all bonds (0 without bonds).
    pub broken_fraction: f64,
    /// Energy terms at the end over the energy guard's scale (`Budget::energy_scale`, the run's
    /// largest kinetic + elastic energy): E_trans, E_rot, U_bend, U_axial, U_shear, U_contact,
    /// U_wall, U_gravity, E_released, E_dissipated.
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
    /// Taken by damping and friction (MODEL §10), so that the terms add up to E0's share.
    pub e_dissipated: f64,
}

impl ImpactWatch {
    /// The watch of a run starting at `first`.
    pub fn new(first: &Diagnostics, walls: &[Wall]) -> ImpactWatch {
        let mut w = ImpactWatch { v_cm0: Some(first.v_cm), ..Default::default() };
        w.observe(&WallAt::of(first), walls);
        w
    }

    /// Takes one step.
    pub fn observe(&mut self, at: &WallAt, walls: &[Wall]) {
        self.observed += 1;
        let f = at.f_wall.length();
        if f > 0.0 {
            if self.first_contact_step.is_none() {
                self.first_contact_step = Some(at.step);
                self.normal = walls
                    .iter()
                    .map(|w| w.normal)
                    .max_by(|a, b| a.dot(at.f_wall).total_cmp(&b.dot(at.f_wall)))
                    .or(Some(at.f_wall / f));
            }
            if !self.in_contact {
                self.episodes += 1;
            }
            self.last_contact_step = Some(at.step);
            if f > self.peak_force {
                self.peak_force = f;
                self.peak_step = Some(at.step);
            }
            self.in_contact = true;
            self.separated = None;
            return;
        }
        self.in_contact = false;
        if let (Some(n), Some(_), None) = (self.normal, self.last_contact_step, self.separated) {
            let vn = at.v_cm.dot(n);
            if vn > 0.0 {
                self.separated = Some((at.step, vn));
            }
        }
    }

    /// Converts the contact times of a checkpoint written by the record-cadence tracker into
    /// steps (its separation is not known: the run resumed from it finds it again, or not).
    pub fn upgrade(&mut self, dt: f64) {
        let step = |t: f64| (t / dt).round() as u64;
        if let Some(t) = self.legacy_first.take() {
            self.first_contact_step.get_or_insert(step(t));
        }
        if let Some(t) = self.legacy_last.take() {
            self.last_contact_step.get_or_insert(step(t));
        }
        if let Some(t) = self.legacy_peak.take() {
            self.peak_step.get_or_insert(step(t));
        }
    }

    /// The measures at the end of the run (`last`: its final diagnostics; `scale`: the energy
    /// guard's scale; `dt`: the time step; `gravity`: the centre of mass's acceleration by the
    /// model's uniform field (g times the free particles' share of the mass), which the impact
    /// speed adds over the flight to the first contact).
    pub fn finish(&self, dt: f64, scale: f64, last: &Diagnostics, n_bonds: usize, gravity: DVec3) -> Impact {
        let t = |s: Option<u64>| s.map(|s| s as f64 * dt);
        let n = self.normal;
        // The flight's velocity at the first contact step: v_cm(0) + g t (the integrators give
        // the nodes' velocities exactly so under a constant force, up to round-off).
        let flight = t(self.first_contact_step).map_or(DVec3::ZERO, |t1| gravity * t1);
        // `0.0 −`, not a negation: a velocity along the wall gives +0, not −0 ("−0 ≤ 0").
        let impact = n.zip(self.v_cm0).map(|(n, v)| 0.0 - (v + flight).dot(n));
        // The speed along the wall's normal is only an impact where it is more than the
        // velocity's round-off: a body sent along the wall (cos 90° = 6e-17 in floating point)
        // touched it with 1e-16 and "rebounded" at 6e-16, a restitution of 5.
        let speed = self.v_cm0.map_or(0.0, |v| (v + flight).length());
        let rebound = self.separated.map(|s| s.1);
        let no_restitution = match (impact, rebound) {
            (Some(i), Some(_)) if i <= 0.0 => Some(format!(
                "the body was not moving towards the wall when it first touched it (impact speed {i:.4e} ≤ 0)"
            )),
            (Some(i), Some(_)) if i <= IMPACT_ROUND_OFF * speed => Some(format!(
                "the body was moving along the wall when it first touched it (impact speed {i:.4e}, within \
                 {IMPACT_ROUND_OFF:e} of its speed {speed:.4e}: round-off)"
            )),
            _ => None,
        };
        let no_rebound = match (self.first_contact_step, self.separated) {
            (_, Some(_)) => None,
            (None, None) => Some("the body never touched a wall".to_string()),
            (Some(_), None) if self.in_contact => Some("the body still touched the wall at the end of the run".into()),
            (Some(_), None) => Some(
                "the body had not separated by the end of the run (no wall force, but not moving away from the wall)"
                    .into(),
            ),
        };
        let e = |v: f64| if scale > 0.0 { v / scale } else { 0.0 };
        Impact {
            wall_normal: n,
            first_contact_t: t(self.first_contact_step),
            last_contact_t: t(self.last_contact_step),
            contact_duration: self.first_contact_step.zip(self.last_contact_step).map(|(a, b)| (b - a) as f64 * dt),
            in_contact_at_end: self.in_contact,
            peak_wall_force: self.peak_force,
            peak_wall_force_t: t(self.peak_step),
            impact_speed: impact,
            separated: self.separated.is_some(),
            separation_t: t(self.separated.map(|s| s.0)),
            rebound_speed: rebound,
            free_flight_t: self.separated.map(|s| (last.step.saturating_sub(s.0)) as f64 * dt),
            contact_episodes: self.episodes,
            restitution: impact.zip(rebound).filter(|_| no_restitution.is_none()).map(|(i, r)| r / i),
            no_rebound,
            no_restitution,
            steps_observed: self.observed,
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
                e_dissipated: e(last.e_dissipated),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wall() -> Vec<Wall> {
        vec![Wall { point: DVec3::ZERO, normal: DVec3::X }]
    }

    fn at(step: u64, f: f64, v: f64) -> WallAt {
        WallAt { step, f_wall: DVec3::new(f, 0.0, 0.0), v_cm: DVec3::new(v, 0.0, 0.0) }
    }

    #[test]
    fn a_normal_speed_at_round_off_is_no_impact() {
        // Sent along the wall at 2 with cos 90° = 6e-17 in the normal: it touches at 1.2e-16
        // and leaves at 6.4e-16 (what a study at 90° reported, restitution 5.25); at 1e-8 of
        // its speed the impact counts (a grazing one), at 1e-10 it is round-off.
        for (vn, counts) in [(-1.2246e-16, false), (-2e-10, false), (-2e-8, true)] {
            let first = Diagnostics { v_cm: DVec3::new(vn, -2.0, 0.0), ..Default::default() };
            let mut w = ImpactWatch::new(&first, &wall());
            w.observe(&WallAt { step: 1, f_wall: DVec3::new(5e-14, 0.0, 0.0), v_cm: first.v_cm }, &wall());
            w.observe(&WallAt { step: 2, f_wall: DVec3::ZERO, v_cm: DVec3::new(6.43e-16, -2.0, 0.0) }, &wall());
            let i = w.finish(0.1, 1.0, &Diagnostics::default(), 0, DVec3::ZERO);
            assert_eq!((i.impact_speed, i.separated), (Some(-vn), true));
            assert_eq!(i.restitution.is_some(), counts, "{vn}: {:?}", i.restitution);
            assert_eq!(i.no_restitution.is_none(), counts, "{vn}: {:?}", i.no_restitution);
            if !counts {
                assert!(i.no_restitution.unwrap().contains("round-off"));
            }
        }
    }

    #[test]
    fn a_pause_in_contact_is_not_a_rebound() {
        let first = Diagnostics { v_cm: DVec3::new(-2.0, 0.0, 0.0), ..Default::default() };
        let mut w = ImpactWatch::new(&first, &wall());
        for (s, f, v) in [(1, 0.0, -2.0), (2, 5.0, -1.0), (3, 9.0, 0.0), (4, 0.0, -0.1), (5, 3.0, 0.5)] {
            w.observe(&at(s, f, v), &wall());
        }
        // Contact paused at step 4 while moving towards the wall: no separation.
        let i = w.finish(0.1, 1.0, &Diagnostics::default(), 0, DVec3::ZERO);
        assert!(!i.separated && i.restitution.is_none() && i.in_contact_at_end);
        assert_eq!(
            (i.first_contact_t, i.peak_wall_force, i.peak_wall_force_t),
            (Some(0.2), 9.0, Some(0.30000000000000004))
        );
        // Leaves the wall at step 6, moving away at 1.5: a rebound, restitution 0.75.
        w.observe(&at(6, 0.0, 1.5), &wall());
        w.observe(&at(7, 0.0, 1.4), &wall());
        let i = w.finish(0.1, 1.0, &Diagnostics::default(), 0, DVec3::ZERO);
        assert!(i.separated);
        assert_eq!((i.rebound_speed, i.restitution, i.last_contact_t), (Some(1.5), Some(0.75), Some(0.5)));
        assert_eq!(i.contact_episodes, 2);
        assert!(i.no_rebound.is_none());
        // The partition: each term over the scale, the energy taken by dashpots included, so that
        // the terms add up to the ledger (distinct values: a term swapped or left out shows).
        let last = Diagnostics {
            e_trans: 1.0,
            e_rot: 2.0,
            u_bend: 3.0,
            u_axial: 4.0,
            u_shear: 5.0,
            u_contact: 6.0,
            u_wall: 7.0,
            u_gravity: 8.0,
            e_released: 9.0,
            e_dissipated: 10.0,
            ..Default::default()
        };
        let p = w.finish(0.1, 2.0, &last, 0, DVec3::ZERO).energy_partition;
        let terms = [
            p.e_trans,
            p.e_rot,
            p.u_bend,
            p.u_axial,
            p.u_shear,
            p.u_contact,
            p.u_wall,
            p.u_gravity,
            p.e_released,
            p.e_dissipated,
        ];
        assert_eq!(terms, [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0]);
        assert_eq!(terms.iter().sum::<f64>(), last.budget_total() / 2.0);
    }

    #[test]
    fn the_legacy_tracker_loads() {
        let json = r#"{"v_cm0":[-1.0,0.0,0.0],"normal":[1.0,0.0,0.0],"first_contact":0.5,"last_contact":0.75,
            "peak_force":12.0,"peak_time":0.6,"in_contact":false,"v_after":[0.5,0.0,0.0]}"#;
        let mut w: ImpactWatch = serde_json::from_str(json).expect("old checkpoints load");
        w.upgrade(0.05);
        assert_eq!((w.first_contact_step, w.last_contact_step, w.peak_step), (Some(10), Some(15), Some(12)));
        assert_eq!(w.peak_force, 12.0);
    }
}

//! The dissipation's part of a saved state (MODEL §10): after the rupture part, a replica that
//! dissipates stores its raw `dload` (three vec4 per particle: the loads of its last evaluation
//! and each particle's share of E_dissipated) and, with friction, the contact history its next
//! evaluation reads: with pair friction per particle the count of its contacts with
//! higher-index partners (u32), `HIST_SLOTS` partner indices (u32, replica-relative) and
//! `HIST_SLOTS` ξ (vec4 of reals); with wall friction per particle ξ at each of its walls (vec4).
//! Loaded into copy 0 of the history; renumbered by moving each pair to its new lower index.

use super::GpuEngine;
use crate::error::EngineError;
use crate::gpu::shader::HIST_SLOTS;
use crate::gpu::sizes::real_size;

/// What a replica's dissipation tail holds, in bytes per part.
struct Tail {
    dload: usize,
    count: usize,
    keys: usize,
    xi: usize,
    walls: usize,
}

impl Tail {
    fn total(&self) -> usize {
        self.dload + self.count + self.keys + self.xi + self.walls
    }
}

impl GpuEngine {
    fn tail(&self, r: usize) -> Tail {
        let d = self.reps[r].params.dissipation.unwrap_or_default();
        let on = self.reps[r].params.dissipation.is_some();
        let np = self.state.layout.n_particles[r] as usize;
        let v4 = 4 * real_size(self.precision);
        let pairs = d.mu > 0.0;
        Tail {
            dload: if on { 3 * v4 * np } else { 0 },
            count: if pairs { 4 * np } else { 0 },
            keys: if pairs { 4 * HIST_SLOTS * np } else { 0 },
            xi: if pairs { v4 * HIST_SLOTS * np } else { 0 },
            walls: if d.mu_wall > 0.0 { v4 * self.reps[r].params.walls.len() * np } else { 0 },
        }
    }

    /// Bytes of replica r's dissipation tail in a saved state (0 without dissipation).
    pub(super) fn dissipation_bytes(&self, r: usize) -> usize {
        self.tail(r).total()
    }

    /// Replica r's dissipation tail (module note).
    pub(super) fn save_dissipation(&mut self, r: usize) -> Result<Vec<u8>, EngineError> {
        let t = self.tail(r);
        if t.total() == 0 {
            return Ok(Vec::new());
        }
        let mut out = self.state.read_dload_raw(&self.ctx.device, &self.ctx.queue, r)?;
        let (p0, np) = (self.state.layout.p_start[r] as u64, self.np(r));
        let v4 = 4 * real_size(self.precision) as u64;
        let slots = self.state.wall_slots as u64;
        let mut got = self.read_history(r, &t)?;
        // Slots past a particle's count hold what earlier steps left there, never read: zeros in
        // the saved state, so that the same state always saves the same bytes.
        let xi_slot = v4 as usize;
        for p in 0..got[0].len() / 4 {
            let c = u32::from_le_bytes([got[0][4 * p], got[0][4 * p + 1], got[0][4 * p + 2], got[0][4 * p + 3]]);
            let (from, to) = (p * HIST_SLOTS + c as usize, (p + 1) * HIST_SLOTS);
            got[1][4 * from..4 * to].fill(0);
            got[2][xi_slot * from..xi_slot * to].fill(0);
        }
        out.extend_from_slice(&got[0]);
        // Partner indices relative to the replica, as its model alone numbers them (zero: unused).
        out.extend(got[1].chunks_exact(4).flat_map(|b| {
            let k = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if k == 0 { 0u32 } else { k.wrapping_sub(p0 as u32) }.to_le_bytes()
        }));
        out.extend_from_slice(&got[2]);
        // Each particle's walls (the batch's rows hold `wall_slots`).
        let own = t.walls / np.max(1) as usize;
        for rowb in got[3].chunks_exact((v4 * slots).max(1) as usize) {
            out.extend_from_slice(&rowb[..own]);
        }
        debug_assert_eq!(out.len(), t.total());
        Ok(out)
    }

    /// Replica r's `Engine::tangential_displacement`: from the history copy its next
    /// evaluation reads (the last evaluation's output), each stored pair counted at both its
    /// particles (its owner keeps it), then each particle's walls.
    pub(super) fn tangential_displacement_of(&mut self, r: usize) -> Result<Option<Vec<f64>>, EngineError> {
        if !self.reps[r].params.dissipation.is_some_and(|d| d.friction()) {
            return Ok(None);
        }
        let t = self.tail(r);
        let (p0, np) = (self.state.layout.p_start[r] as u64, self.np(r));
        let slots = self.state.wall_slots as u64;
        let got = self.read_history(r, &t)?;
        let f64s = self.precision == crate::engine::Precision::F64;
        // |ξ| of the vec4 at element k of `b`, as the CPU's `DVec3::length`.
        let length = |b: &[u8], k: usize| -> f64 {
            let c: [f64; 3] = std::array::from_fn(|lane| {
                if f64s {
                    let at = 8 * (4 * k + lane);
                    f64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default())
                } else {
                    let at = 4 * (4 * k + lane);
                    f32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default()) as f64
                }
            });
            (c[0] * c[0] + c[1] * c[1] + c[2] * c[2]).sqrt()
        };
        let word = |b: &[u8], k: usize| u32::from_le_bytes([b[4 * k], b[4 * k + 1], b[4 * k + 2], b[4 * k + 3]]);
        let np = np as usize;
        let mut out = vec![0.0f64; np];
        if t.count > 0 {
            for a in 0..np {
                for slot in a * HIST_SLOTS..a * HIST_SLOTS + word(&got[0], a) as usize {
                    let x = length(&got[2], slot);
                    let b = (word(&got[1], slot) as u64).wrapping_sub(p0) as usize;
                    out[a] = out[a].max(x);
                    if let Some(o) = out.get_mut(b) {
                        *o = o.max(x);
                    }
                }
            }
        }
        if t.walls > 0 {
            let own = self.reps[r].params.walls.len();
            for (a, o) in out.iter_mut().enumerate() {
                for w in 0..own {
                    *o = o.max(length(&got[3], a * slots as usize + w));
                }
            }
        }
        Ok(Some(out))
    }

    /// Replica r's rows of the history copy its next evaluation reads, raw, in `tail`'s parts:
    /// counts, partner keys (batch indices), ξ, and the walls' ξ (`wall_slots` per particle).
    fn read_history(&self, r: usize, t: &Tail) -> Result<Vec<Vec<u8>>, EngineError> {
        let (n, p0, np) = (self.state.n as u64, self.state.layout.p_start[r] as u64, self.np(r));
        let row = self.reps[r].hist_parity as u64 * n + p0;
        // Bytes per particle and copy of each array (`DemState::history_row_bytes`).
        let per = |name: &str| self.state.history_row_bytes(name).unwrap_or(0);
        let parts = [
            ("hist_count", per("hist_count") * row, t.count as u64),
            ("hist_key", per("hist_key") * row, t.keys as u64),
            ("hist_xi", per("hist_xi") * row, t.xi as u64),
            ("whist", per("whist") * row, if t.walls > 0 { per("whist") * np } else { 0 }),
        ];
        Ok(self.state.read_ranges_raw(&self.ctx.device, &self.ctx.queue, &parts)?)
    }

    fn np(&self, r: usize) -> u64 {
        self.state.layout.n_particles[r] as u64
    }

    /// Loads a one-replica dissipation tail (`save_dissipation`'s bytes): `dload`, and the
    /// history into copy 0, which the next evaluation then reads.
    pub(super) fn load_dissipation(&mut self, bytes: &[u8]) {
        let t = self.tail(0);
        let (dload, rest) = bytes.split_at(t.dload);
        self.state.write_dload_raw(&self.ctx.queue, dload, 0);
        let (count, rest) = rest.split_at(t.count);
        let (keys, rest) = rest.split_at(t.keys);
        let (xi, walls) = rest.split_at(t.xi);
        for (name, part) in [("hist_count", count), ("hist_key", keys), ("hist_xi", xi), ("whist", walls)] {
            self.state.write_range_raw(&self.ctx.queue, name, 0, part);
        }
        self.reps[0].hist_parity = 0;
    }

    /// A one-replica dissipation tail renumbered by `perm` (new particle k was old
    /// `perm.particles[k]`): `dload` and the walls' history gathered by particle; each pair's ξ
    /// moved to its new lower index (negated where the order of its two particles flips) and
    /// each particle's pairs sorted by partner.
    pub(super) fn permuted_dissipation(
        &self,
        bytes: &[u8],
        perm: &crate::order::Order,
    ) -> Result<Vec<u8>, EngineError> {
        let t = self.tail(0);
        let np = perm.particles.len();
        let mut out = Vec::with_capacity(bytes.len());
        let gather = |out: &mut Vec<u8>, part: &[u8]| {
            let size = part.len() / np.max(1);
            for &k in &perm.particles {
                out.extend_from_slice(&part[k as usize * size..(k as usize + 1) * size]);
            }
        };
        let (dload, rest) = bytes.split_at(t.dload);
        gather(&mut out, dload);
        let (count, rest) = rest.split_at(t.count);
        let (keys, rest) = rest.split_at(t.keys);
        let (xi, walls) = rest.split_at(t.xi);
        if t.count > 0 {
            let v4 = 4 * real_size(self.precision);
            let mut new_of = vec![0u32; np];
            for (new, &old) in perm.particles.iter().enumerate() {
                new_of[old as usize] = new as u32;
            }
            let word = |b: &[u8], k: usize| u32::from_le_bytes([b[4 * k], b[4 * k + 1], b[4 * k + 2], b[4 * k + 3]]);
            // (owner, partner, ξ bytes, negated) of every stored pair, in the new numbering.
            let mut pairs: Vec<(u32, u32, Vec<u8>, bool)> = Vec::new();
            for a in 0..np {
                for s in 0..word(count, a) as usize {
                    let slot = a * HIST_SLOTS + s;
                    let (na, nb) = (new_of[a], new_of[word(keys, slot) as usize]);
                    let x = xi[slot * v4..(slot + 1) * v4].to_vec();
                    pairs.push(if na < nb { (na, nb, x, false) } else { (nb, na, x, true) });
                }
            }
            pairs.sort_by_key(|p| (p.0, p.1));
            let (mut c, mut k, mut x) = (vec![0u32; np], vec![0u32; np * HIST_SLOTS], vec![0u8; np * HIST_SLOTS * v4]);
            for (owner, partner, bytes, negate) in pairs {
                let o = owner as usize;
                if c[o] as usize >= HIST_SLOTS {
                    return Err(EngineError::Unsupported(format!(
                        "renumbered, particle {owner} would keep more than {HIST_SLOTS} frictional contacts with \
                         higher-index spheres (the GPU engine's bound, MODEL §10); run this model with backend `cpu`"
                    )));
                }
                let slot = o * HIST_SLOTS + c[o] as usize;
                k[slot] = partner;
                let target = &mut x[slot * v4..(slot + 1) * v4];
                target.copy_from_slice(&bytes);
                if negate {
                    negate_reals(target, self.precision);
                }
                c[o] += 1;
            }
            out.extend(c.iter().flat_map(|w| w.to_le_bytes()));
            out.extend(k.iter().flat_map(|w| w.to_le_bytes()));
            out.extend_from_slice(&x);
        }
        if !walls.is_empty() {
            gather(&mut out, walls);
        }
        debug_assert_eq!(out.len(), bytes.len());
        Ok(out)
    }
}

/// Negates the three reals of a raw vec4 (little-endian, the device's precision) by their sign
/// bits: exact, as the CPU's `-ξ`.
fn negate_reals(v: &mut [u8], precision: crate::engine::Precision) {
    let rs = real_size(precision);
    for lane in 0..3 {
        v[(lane + 1) * rs - 1] ^= 0x80;
    }
}

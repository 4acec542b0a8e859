//! The dissipation's part of a saved state (MODEL §10): after the rupture part, a replica that
//! dissipates stores its raw dissipative loads (three vec4 per particle, `shader::DLOAD_ARRAYS`
//! interleaved, as when they were one array: the loads of its last evaluation
//! and each particle's share of E_dissipated) and, with friction, the contact history its next
//! evaluation reads: with pair friction per particle the count of its contacts with
//! higher-index partners (u32), `HIST_SLOTS` partner indices (u32, replica-relative) and
//! `HIST_SLOTS` ξ (vec4 of reals); with wall friction per particle ξ at each of its walls (vec4).
//! So each pair is saved once, by its lower index, although the device keeps it at both
//! particles (shaders/bindings.wgsl): saving keeps each row's higher-index partners, loading
//! adds each pair to its higher index's row too, negated. Renumbered by moving each pair to its
//! new lower index.

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
        // The device's rows (`DemState::history_row_bytes`), with pair friction.
        let row = |name: &str| if d.mu > 0.0 { self.state.history_row_bytes(name).unwrap_or(0) as usize } else { 0 };
        Tail {
            dload: if on { 3 * v4 * np } else { 0 },
            count: row("hist_count") * np,
            keys: row("hist_key") * np,
            xi: row("hist_xi") * np,
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
        // Each row's pairs with higher-index partners (the lower index saves a pair), moved to
        // the row's front. Slots past them hold what earlier steps left there, never read: zeros
        // in the saved state, so that the same state always saves the same bytes.
        let xi_slot = v4 as usize;
        for p in 0..got[0].len() / 4 {
            let count = word(&got[0], p) as usize;
            let mut kept = 0;
            for s in 0..count {
                let (from, to) = (p * HIST_SLOTS + s, p * HIST_SLOTS + kept);
                if word(&got[1], from) as u64 > p0 + p as u64 {
                    got[1].copy_within(4 * from..4 * from + 4, 4 * to);
                    got[2].copy_within(xi_slot * from..xi_slot * (from + 1), xi_slot * to);
                    kept += 1;
                }
            }
            got[0][4 * p..4 * p + 4].copy_from_slice(&(kept as u32).to_le_bytes());
            let (from, to) = (p * HIST_SLOTS + kept, (p + 1) * HIST_SLOTS);
            got[1][4 * from..4 * to].fill(0);
            got[2][xi_slot * from..xi_slot * to].fill(0);
        }
        // The bonded pairs' history beside the incidence, into the rows by lower index.
        if let Some(inc) = self.bond_history_incidence(r) {
            self.merge_bond_history(r, &inc, &mut got[..3])?;
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

    /// Replica r's `Engine::tangential_displacement`: from the history its next evaluation reads
    /// (the last evaluation's output), each particle's contacts (both particles of a pair keep
    /// it), then its walls.
    pub(super) fn tangential_displacement_of(&mut self, r: usize) -> Result<Option<Vec<f64>>, EngineError> {
        if !self.reps[r].params.dissipation.is_some_and(|d| d.friction()) {
            return Ok(None);
        }
        let t = self.tail(r);
        let np = self.np(r);
        let slots = self.state.wall_slots as u64;
        let got = self.read_history(r, &t)?;
        let v4 = 4 * real_size(self.precision);
        // |ξ| of the vec4 at element k of `b`.
        let length = |b: &[u8], k: usize| vec4_length(&b[k * v4..(k + 1) * v4], self.precision);
        let np = np as usize;
        let mut out = vec![0.0f64; np];
        if t.count > 0 {
            for (a, o) in out.iter_mut().enumerate() {
                for slot in a * HIST_SLOTS..a * HIST_SLOTS + word(&got[0], a) as usize {
                    *o = o.max(length(&got[2], slot));
                }
            }
        }
        if let Some(inc) = self.bond_history_incidence(r) {
            self.bond_history_lengths(r, &inc, &mut out)?;
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

    /// Replica r's rows of the history its next evaluation reads, raw, in `tail`'s parts:
    /// counts, partner keys (batch indices), ξ, and the walls' ξ (`wall_slots` per particle).
    fn read_history(&self, r: usize, t: &Tail) -> Result<Vec<Vec<u8>>, EngineError> {
        let (row, np) = (self.state.layout.p_start[r] as u64, self.np(r));
        // Bytes per particle of each array (`DemState::history_row_bytes`).
        let per = |name: &str| self.state.history_row_bytes(name).unwrap_or(0);
        let parts = [
            ("hist_count", per("hist_count") * row, t.count as u64),
            ("hist_key", per("hist_key") * row, t.keys as u64),
            ("hist_xi", per("hist_xi") * row, t.xi as u64),
            ("whist", per("whist") * row, if t.walls > 0 { per("whist") * np } else { 0 }),
        ];
        Ok(self.state.read_ranges_raw(&self.ctx.device, &self.ctx.queue, &parts)?)
    }

    pub(super) fn np(&self, r: usize) -> u64 {
        self.state.layout.n_particles[r] as u64
    }

    /// Loads a one-replica dissipation tail (`save_dissipation`'s bytes) into replica r: the
    /// dissipative loads, and the history, which the next evaluation then reads, each pair into
    /// both its particles' rows (partners as batch indices, each particle's walls in a row of
    /// the batch's `wall_slots`).
    pub(super) fn load_dissipation(&mut self, r: usize, bytes: &[u8]) -> Result<(), EngineError> {
        let t = self.tail(r);
        let (dload, rest) = bytes.split_at(t.dload);
        self.state.write_dload_raw(&self.ctx.queue, dload, r);
        let (count, rest) = rest.split_at(t.count);
        let (keys, rest) = rest.split_at(t.keys);
        let (xi, walls) = rest.split_at(t.xi);
        // The bonded pairs' history goes beside the incidence, the others' into the rows.
        let (mut count, mut keys, mut xi) = (count.to_vec(), keys.to_vec(), xi.to_vec());
        if let Some(inc) = self.bond_history_incidence(r) {
            self.split_bond_history(r, &inc, &mut count, &mut keys, &mut xi);
        }
        let [count, mut keys, xi] = both_ends(&count, &keys, &xi, self.precision)?;
        let p0 = self.state.layout.p_start[r];
        if p0 > 0 {
            // Partners counted from the replica's first particle in the batch.
            for a in 0..count.len() / 4 {
                for s in 0..word(&count, a) as usize {
                    let at = 4 * (a * HIST_SLOTS + s);
                    let k = u32::from_le_bytes([keys[at], keys[at + 1], keys[at + 2], keys[at + 3]]) + p0;
                    keys[at..at + 4].copy_from_slice(&k.to_le_bytes());
                }
            }
        }
        let own = t.walls / self.np(r).max(1) as usize;
        let row = self.state.history_row_bytes("whist").unwrap_or(0) as usize;
        let walls: Vec<u8> = if own == row || walls.is_empty() {
            walls.to_vec()
        } else {
            walls
                .chunks_exact(own.max(1))
                .flat_map(|w| w.iter().copied().chain(std::iter::repeat_n(0, row - own)))
                .collect()
        };
        for (name, part) in [("hist_count", &count[..]), ("hist_key", &keys), ("hist_xi", &xi), ("whist", &walls)] {
            let at = self.state.history_row_bytes(name).unwrap_or(0) * p0 as u64;
            self.state.write_range_raw(&self.ctx.queue, name, at, part);
        }
        Ok(())
    }

    /// A one-replica dissipation tail renumbered by `perm` (new particle k was old
    /// `perm.particles[k]`): the dissipative loads and the walls' history gathered by particle;
    /// each pair's ξ moved to its new lower index (negated where the order of its two particles
    /// flips) and each particle's pairs sorted by partner.
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
                    return Err(too_many_frictional_contacts(owner as usize, "once renumbered"));
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

/// The error of a sphere with more frictional contacts than the GPU keeps the history of, where
/// `when` says where it was found ("at step 12", "once renumbered", "in the saved state"): one
/// wording for a step, a renumbering and a loaded state.
pub(super) fn too_many_frictional_contacts(particle: usize, when: &str) -> EngineError {
    EngineError::Unsupported(format!(
        "particle {particle} touches more than {HIST_SLOTS} spheres with friction {when}: the GPU engine keeps the \
         tangential history of at most {HIST_SLOTS} contacts per sphere (MODEL §10); run this model with backend `cpu`"
    ))
}

/// The three reals (xyz) of a raw vec4 in the device's precision, as f64.
pub(super) fn vec4_lanes(v: &[u8], precision: crate::engine::Precision) -> [f64; 3] {
    let rs = real_size(precision);
    std::array::from_fn(|lane| {
        let b = &v[lane * rs..(lane + 1) * rs];
        if rs == 8 {
            f64::from_le_bytes(b.try_into().unwrap_or_default())
        } else {
            f32::from_le_bytes(b.try_into().unwrap_or_default()) as f64
        }
    })
}

/// |xyz| of a raw vec4 in the device's precision, as the CPU's `DVec3::length`.
pub(super) fn vec4_length(v: &[u8], precision: crate::engine::Precision) -> f64 {
    let c = vec4_lanes(v, precision);
    (c[0] * c[0] + c[1] * c[1] + c[2] * c[2]).sqrt()
}

/// The little-endian u32 at element k of `b`.
pub(super) fn word(b: &[u8], k: usize) -> u32 {
    u32::from_le_bytes([b[4 * k], b[4 * k + 1], b[4 * k + 2], b[4 * k + 3]])
}

/// The device's rows of a history saved by lower index (counts, replica-relative partners, ξ
/// of a one-replica tail): each particle's pairs with lower-index partners (ξ negated, in the
/// order of those partners), then its saved ones. Ascending in partner either way: the rows
/// are filled in particle order. A particle that would keep more than `HIST_SLOTS` contacts is
/// an error naming it.
fn both_ends(
    count: &[u8],
    keys: &[u8],
    xi: &[u8],
    precision: crate::engine::Precision,
) -> Result<[Vec<u8>; 3], EngineError> {
    let np = count.len() / 4;
    let v4 = 4 * real_size(precision);
    let (mut c, mut k, mut x) = (vec![0u32; np], vec![0u32; np * HIST_SLOTS], vec![0u8; np * HIST_SLOTS * v4]);
    for a in 0..np {
        let saved = word(count, a) as usize;
        // A saved row holds at most HIST_SLOTS partners, each above its particle, ascending, in
        // the model (else the rows would come out unsorted and lose ξ): a corrupt state is refused.
        let row = &keys[4 * a * HIST_SLOTS..4 * (a + 1) * HIST_SLOTS];
        let partners: Vec<usize> = (0..saved.min(HIST_SLOTS)).map(|s| word(row, s) as usize).collect();
        let ascending = partners.iter().try_fold(a, |last, &b| (b > last).then_some(b)).is_some();
        if saved > HIST_SLOTS || !ascending || partners.last().is_some_and(|&b| b >= np) {
            return Err(EngineError::Unsupported(format!(
                "the saved contact history of particle {a} is not {saved} partners above it in ascending order \
                 among the model's {np} (the state is damaged)"
            )));
        }
        for (s, &b) in partners.iter().enumerate() {
            let slot = a * HIST_SLOTS + s;
            for (at, partner, negate) in [(a, b, false), (b, a, true)] {
                let used = c[at];
                if used as usize >= HIST_SLOTS {
                    return Err(too_many_frictional_contacts(at, "in the saved state"));
                }
                let to = at * HIST_SLOTS + used as usize;
                k[to] = partner as u32;
                let target = &mut x[to * v4..(to + 1) * v4];
                target.copy_from_slice(&xi[slot * v4..(slot + 1) * v4]);
                if negate {
                    negate_reals(target, precision);
                }
                c[at] += 1;
            }
        }
    }
    Ok([c.iter().flat_map(|w| w.to_le_bytes()).collect(), k.iter().flat_map(|w| w.to_le_bytes()).collect(), x])
}

/// Negates the three reals of a raw vec4 (little-endian, the device's precision) by their sign
/// bits: exact, as the CPU's `-ξ`.
pub(super) fn negate_reals(v: &mut [u8], precision: crate::engine::Precision) {
    let rs = real_size(precision);
    for lane in 0..3 {
        v[(lane + 1) * rs - 1] ^= 0x80;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Precision;

    /// A one-replica tail of `np` particles in f32 with the given saved rows (partner, ξ.x).
    fn tail(np: usize, rows: &[(usize, Vec<(u32, f32)>)]) -> [Vec<u8>; 3] {
        let (mut c, mut k, mut x) = (vec![0u32; np], vec![0u32; np * HIST_SLOTS], vec![0f32; 4 * np * HIST_SLOTS]);
        for (a, row) in rows {
            c[*a] = row.len() as u32;
            for (s, &(b, v)) in row.iter().enumerate().take(HIST_SLOTS) {
                k[a * HIST_SLOTS + s] = b;
                x[4 * (a * HIST_SLOTS + s)] = v;
            }
        }
        [bytemuck::cast_slice(&c).to_vec(), bytemuck::cast_slice(&k).to_vec(), bytemuck::cast_slice(&x).to_vec()]
    }

    #[test]
    fn both_ends_mirrors_each_pair_negated_in_ascending_rows_and_refuses_damaged_rows() {
        // Pairs (0, 2) ξ 1, (0, 3) ξ 2, (1, 2) ξ 3: row 2 gets 0 (−1) then 1 (−3), row 3 gets 0 (−2).
        let [c, k, x] = tail(4, &[(0, vec![(2, 1.0), (3, 2.0)]), (1, vec![(2, 3.0)])]);
        let [c, k, x] = both_ends(&c, &k, &x, Precision::F32).unwrap();
        let (c, k, x): (&[u32], &[u32], &[f32]) =
            (bytemuck::cast_slice(&c), bytemuck::cast_slice(&k), bytemuck::cast_slice(&x));
        assert_eq!(c, &[2, 1, 2, 1]);
        let row = |a: usize| -> Vec<(u32, f32)> {
            (0..c[a] as usize).map(|s| (k[a * HIST_SLOTS + s], x[4 * (a * HIST_SLOTS + s)])).collect()
        };
        assert_eq!(row(0), vec![(2, 1.0), (3, 2.0)]);
        assert_eq!(row(1), vec![(2, 3.0)]);
        assert_eq!(row(2), vec![(0, -1.0), (1, -3.0)]);
        assert_eq!(row(3), vec![(0, -2.0)]);
        // Damaged: a partner below its particle, out of order, beyond the model, a count too large.
        let too_many: Vec<(u32, f32)> = (1..=HIST_SLOTS as u32 + 1).map(|b| (b, 1.0)).collect();
        for (what, rows) in [
            ("below", vec![(2usize, vec![(1u32, 1.0f32)])]),
            ("descending", vec![(0, vec![(3, 1.0), (2, 1.0)])]),
            ("beyond", vec![(0, vec![(4, 1.0)])]),
            ("too many", vec![(0, too_many)]),
        ] {
            let np = if what == "too many" { HIST_SLOTS + 2 } else { 4 };
            let [c, k, x] = tail(np, &rows);
            let err = both_ends(&c, &k, &x, Precision::F32).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains("damaged"), "{what}: {err}");
        }
    }
}

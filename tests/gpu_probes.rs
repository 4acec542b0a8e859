//! Shared WGSL functions against their Rust twins, run on the device: the f64 `atan2_real` of
//! shaders/atan2_f64.wgsl (f64 has no GPU builtin) against f64::atan2 over all quadrants and many
//! magnitudes, the f32 builtin, `cell_hash` against `grid::cell_hash`, and the bit-level
//! finiteness test against `is_finite`, and the rupture measures and rule against
//! `interactions::rupture`, and the dissipative loads against `interactions::damping`.

mod common;

use common::Rng;
use glam::DVec3;
use rrpdem::engine::Precision;
use rrpdem::gpu::{RuptureCase, atan2_on_device, cell_hash_on_device, finite_on_device, rupture_on_device};
use rrpdem::interactions::rupture::rupture_bounds;
use rrpdem::interactions::{ShearVariant, rupture, rupture_measures};

/// Distance in units in the last place between two finite f64 of the same sign.
fn ulps(a: f64, b: f64) -> u64 {
    if a == b {
        return 0;
    }
    if a.signum() != b.signum() {
        return u64::MAX;
    }
    (a.abs().to_bits() as i64 - b.abs().to_bits() as i64).unsigned_abs()
}

fn inputs() -> Vec<(f64, f64)> {
    let mut rng = Rng(3);
    let mut v = Vec::new();
    for _ in 0..20000 {
        let y = (rng.uniform() - 0.5) * 10f64.powf(rng.uniform() * 12.0 - 6.0);
        let x = (rng.uniform() - 0.5) * 10f64.powf(rng.uniform() * 12.0 - 6.0);
        v.push((y, x));
    }
    // The range reduction's branch points (tan(π/8)·x, 0.66·x, x) and the axes.
    for k in 0..2000 {
        let t = k as f64 / 1000.0;
        v.push((t, 1.0));
        v.push((1.0, t));
        // (−0, x < 0) is left out: the shader returns +π there, Rust −π (callers pass y ≥ 0).
        if k > 0 {
            v.push((-t, -1.0));
        }
    }
    v.extend([(0.0, 1.0), (1.0, 0.0), (0.0, -1.0), (-1.0, 0.0), (1e-300, 1.0), (1.0, 1e-300), (3.0, -4.0)]);
    v
}

#[test]
fn atan2_f64_on_gpu_is_within_two_ulps() {
    let v = inputs();
    let got = atan2_on_device(&v, Precision::F64).unwrap_or_else(|e| {
        panic!("{e}\n(the GPU tests need an adapter: apt-get install mesa-vulkan-drivers libvulkan1)")
    });
    let mut worst = (0, (0.0, 0.0));
    for (&(y, x), &g) in v.iter().zip(&got) {
        let u = ulps(g, y.atan2(x));
        if u > worst.0 {
            worst = (u, (y, x));
        }
    }
    eprintln!("atan2 f64: worst {} ulp at (y, x) = {:?} over {} inputs", worst.0, worst.1, v.len());
    // Cephes' approximation is accurate to ~1 ulp; the y/x division and the quadrant
    // additions add at most one more rounding each.
    assert!(worst.0 <= 2, "worst error {} ulp at {:?}", worst.0, worst.1);
}

#[test]
fn atan2_f32_builtin_is_close() {
    let v = inputs();
    let got = atan2_on_device(&v, Precision::F32).unwrap_or_else(|e| panic!("{e}"));
    let worst = v
        .iter()
        .zip(&got)
        .filter(|((y, x), _)| (*y as f32) != 0.0 || (*x as f32) != 0.0)
        .map(|(&(y, x), &g)| (g - (y as f32 as f64).atan2(x as f32 as f64)).abs())
        .fold(0.0, f64::max);
    eprintln!("atan2 f32 builtin: worst absolute error {worst:.2e}");
    // The builtin's accuracy is the driver's (lavapipe measured 3.3e-6 ≈ 14 ulp of π); 1e-5
    // keeps f32 bending angles well inside the f32 parity tolerances.
    assert!(worst <= 1e-5, "worst absolute error {worst:e}");
}

#[test]
fn cell_hash_matches_the_cpu_grid() {
    let mut rng = Rng(9);
    let mut cells: Vec<[i32; 3]> = (0..5000)
        .map(|_| {
            let mut c = || ((rng.uniform() - 0.5) * 2.0 * (1u64 << 30) as f64) as i32;
            [c(), c(), c()]
        })
        .collect();
    cells.extend([[0, 0, 0], [-1, -1, -1], [1, -1, 0], [i32::MAX, i32::MIN, -7]]);
    for mask in [1u32, 255, (1 << 18) - 1, u32::MAX >> 1] {
        let got = cell_hash_on_device(&cells, mask).unwrap_or_else(|e| panic!("{e}"));
        for (c, g) in cells.iter().zip(&got) {
            assert_eq!(*g, rrpdem::grid::cell_hash(*c, mask), "cell {c:?}, mask {mask}");
        }
    }
}

#[test]
fn finite_check_on_the_device_agrees_with_is_finite() {
    // The edges of each format: NaN (quiet, signalling, negative), ±inf, the largest and
    // smallest normals, subnormals, zeros, and f64 values beyond f32's range, which the f64
    // check scales into it (a finite f64 must never come out as inf).
    let mut v = vec![
        f64::NAN,
        -f64::NAN,
        f64::from_bits(0x7ff0_0000_0000_0001),
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        -f64::MAX,
        f64::MIN_POSITIVE,
        f64::from_bits(1),
        0.0,
        -0.0,
        1.0,
        -2.5,
        f32::MAX as f64,
        -(f32::MAX as f64),
        f32::MIN_POSITIVE as f64,
        1e39,
        1e300,
        1e-300,
    ];
    let mut rng = Rng(9);
    v.extend((0..2000).map(|_| (rng.uniform() - 0.5) * 10f64.powf(rng.uniform() * 600.0 - 300.0)));
    for p in [Precision::F32, Precision::F64] {
        let got = finite_on_device(&v, p).unwrap_or_else(|e| panic!("{e}"));
        for (&x, &g) in v.iter().zip(&got) {
            // The f32 build sees the value rounded to f32 (1e39 → inf, 1e-300 → 0).
            let want = match p {
                Precision::F32 => (x as f32).is_finite(),
                Precision::F64 => x.is_finite(),
            };
            assert_eq!(g, want, "{p:?}: finite_real({x:e})");
        }
        let non_finite = got.iter().filter(|&&g| !g).count();
        assert!(non_finite >= 5, "{p:?}: only {non_finite} non-finite values recognised");
    }
}

#[test]
fn rupture_measures_and_rule_on_the_device_match_their_rust_twins() {
    // Random bonds: stretched and compressed, attitudes from tiny to half-turn rotations (the
    // angles' atan2 is exercised near 0 and near π), both shear laws, thresholds with channels
    // switched off, Weibull-like scales, both rules.
    let mut rng = Rng(11);
    let mut cases = Vec::new();
    for k in 0..4000 {
        let max_angle = [1e-6, 1e-2, 0.5, 3.1][k % 4];
        let dhat0 = rng.unit();
        let mut inv = [0.0; 4];
        for c in &mut inv {
            if rng.uniform() < 0.7 {
                *c = rng.range(0.5, 40.0);
            }
        }
        let mut case = RuptureCase {
            variant: if k % 2 == 0 { ShearVariant::Objective } else { ShearVariant::Paper },
            d: rng.rotation(max_angle) * dhat0 * rng.range(0.8, 1.2),
            l0: rng.range(0.9, 1.1),
            dhat0,
            dq_i: rng.rotation(max_angle),
            dq_j: rng.rotation(max_angle),
            inv_thresholds: inv,
            scale: rng.range(0.5, 2.0),
            sum: false,
        };
        // Every fifth bond sits within ±1e-4 of one channel's threshold (the any rule), where
        // `bond_breaks` must not hold a bond on its bounds that its measures break.
        if k % 5 == 4 {
            let m = rupture_measures(case.variant, case.d, case.l0, case.dhat0, case.dq_i, case.dq_j);
            let c = (k / 5) % 4;
            if m[c] > 1e-9 {
                case.inv_thresholds = [0.0; 4];
                case.inv_thresholds[c] = (1.0 + rng.range(-1e-4, 1e-4)) / (m[c] * case.scale);
            }
        } else {
            case.sum = k % 3 == 0;
        }
        cases.push(case);
    }
    for (p, tol) in [(Precision::F64, 1e-14), (Precision::F32, 2e-5)] {
        let got = rupture_on_device(&cases, p).unwrap_or_else(|e| panic!("{e}"));
        let (mut worst, mut compared, mut broke, mut measured) = (0.0f64, 0, 0, 0);
        for (c, r) in cases.iter().zip(&got) {
            let (m, mode) = (&r.measures, &r.mode);
            // On the device: the bounds are above the measures, and `bond_breaks` (the bond
            // kernel's test) decides as the measures do, near the thresholds included.
            for (k, (m, b)) in m.iter().zip(r.bounds).enumerate() {
                assert!(*m <= b, "{p:?} channel {k}: measure {m} above bound {b}: {c:?}");
            }
            assert_eq!(r.breaks, *mode, "{p:?}: bond_breaks against rupture(rupture_measures): {c:?}");
            let b = rupture_bounds(c.variant, c.d, c.l0, c.dhat0, c.dq_i, c.dq_j, 0.0);
            measured += rupture(b, c.inv_thresholds, c.scale, c.sum).is_some() as usize;
            let want = rupture_measures(c.variant, c.d, c.l0, c.dhat0, c.dq_i, c.dq_j);
            for (a, b) in m.iter().zip(want) {
                worst = worst.max((a - b).abs());
            }
            // The decision is compared where the ratios are not within round-off of the
            // threshold (there either answer is right): a measure off by `tol` moves a ratio by
            // at most tol·40/0.5, a sum of four by four times that.
            let margin = 320.0 * tol;
            let ratios: Vec<f64> = (0..4).map(|k| want[k] * c.inv_thresholds[k] / c.scale).collect();
            let deciding = if c.sum { ratios.iter().sum() } else { ratios.iter().copied().fold(0.0, f64::max) };
            let mut sorted = ratios.clone();
            sorted.sort_by(f64::total_cmp);
            let tie = sorted[3] - sorted[2] < margin;
            if (deciding - 1.0).abs() > margin && !tie {
                assert_eq!(*mode, rupture(want, c.inv_thresholds, c.scale, c.sum), "{p:?}: {c:?}");
                compared += 1;
                broke += mode.is_some() as usize;
            }
        }
        eprintln!(
            "{p:?}: worst measure difference {worst:.2e}; {compared} decisions compared, {broke} breaking; \
             {measured} of {} needed their measures",
            cases.len()
        );
        assert!(worst <= tol, "{p:?}: measures differ by {worst:e}");
        assert!(compared > 3000 && broke > 500 && compared - broke > 500, "{p:?}: {compared} {broke}");
    }
}

#[test]
fn device_arithmetic_report_is_ieee_on_lavapipe() {
    // The CPU-parity bounds of the f64 tests (V7, V9) assume a device that rounds as IEEE 754.
    // Lavapipe does (LLVM on the CPU); a hardware GPU may not (docs/GPU.md, "Real GPU"), and
    // there the report must say so rather than fail.
    for p in [Precision::F32, Precision::F64] {
        let r = rrpdem::gpu::arithmetic_on_device(p).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.cases, 4096);
        let lavapipe = rrpdem::gpu::list_adapters().first().is_some_and(|a| a.name.contains("llvmpipe"));
        if lavapipe {
            assert!(r.ieee(), "{p:?}: {r:?}");
            // The inputs tell fused from unfused: many a·b + c differ between the two, so a
            // device that fuses cannot pass as IEEE.
            assert!(r.mul_add_as_fused < r.cases / 2, "{p:?}: {r:?}");
        } else {
            eprintln!("{p:?} on a hardware adapter: {r:?}");
        }
    }
}

#[test]
fn contact_dissipation_and_binder_damping_on_the_device_match_their_rust_twins() {
    use rrpdem::gpu::{DampingCase, damping_on_device};
    use rrpdem::interactions::{binder_damping, contact_dissipation};
    // Random contacts: sticking and slipping, new (ξ = 0) and old histories, with and without
    // friction (μ = 0 returns the dashpot alone), loads of order one.
    let mut rng = Rng(29);
    let mut cases = Vec::new();
    for k in 0..3000 {
        let s = rng.range(1e-4, 0.05);
        let k_h = rng.range(1e2, 1e4);
        cases.push(DampingCase {
            n: rng.unit(),
            s,
            f_el: k_h * s * s.sqrt(),
            k_h,
            m_star: rng.range(0.1, 2.0),
            l_i: rng.range(0.3, 1.0),
            l_j: rng.range(0.0, 1.0),
            dv: rng.cube(1.0),
            w_i: rng.cube(2.0),
            w_j: rng.cube(2.0),
            xi: if k % 3 == 0 { DVec3::ZERO } else { rng.cube(0.01) },
            h: rng.range(1e-4, 1e-2),
            beta: rng.range(0.0, 0.7),
            mu: if k % 4 == 0 { 0.0 } else { rng.range(0.05, 1.0) },
            kappa: rng.range(0.2, 1.0),
            gamma: [rng.range(0.0, 2.0), rng.range(0.0, 2.0), rng.range(0.0, 2.0), rng.range(0.0, 2.0)],
        });
    }
    // Each load is a few tens of roundings of terms no larger than the case's scale (the
    // largest input load, times 4); the slip branch rescales ξ by k_t, which amplifies the error
    // of ξ·k_t. Measured in f32: 3.8e-6 of the scale on lavapipe (IEEE), 8.7e-6 on an H100 (fused
    // a·b + c, division within 2 ulp, `rrpdem info`): held to 2e-5 (~340 ulps). f64: 0 on
    // lavapipe, 1.8e-15 on the H100. A case whose trial force is within 1e-3 of the Coulomb limit
    // may take the other branch in f32 (or in f64 across a fused multiply-add): its contact
    // loads are left out (its binder loads, which have no branch, are compared).
    for (p, tol) in [(Precision::F64, 1e-13), (Precision::F32, 2e-5)] {
        let got = damping_on_device(&cases, p).unwrap_or_else(|e| panic!("{e}"));
        let (mut worst, mut slipped, mut near) = (0.0f64, 0, 0);
        for (c, (o, g)) in cases.iter().zip(&got) {
            let want = contact_dissipation(
                c.n, c.s, c.f_el, c.k_h, c.m_star, c.l_i, c.l_j, c.dv, c.w_i, c.w_j, c.xi, c.h, c.beta, c.mu, c.kappa,
            );
            let bond = binder_damping(c.xi, c.dv, c.w_i, c.w_j, c.gamma);
            let k_t = c.kappa * 1.5 * c.k_h * c.s.sqrt();
            let scale = (c.f_el + k_t * (c.xi.length() + c.h * 5.0) + 1.0) * 4.0;
            let eta_n = 5f64.sqrt() * c.beta * (c.m_star * c.k_h).sqrt() * c.s.sqrt().sqrt();
            let limit = c.mu * (c.f_el - eta_n * c.dv.dot(c.n)).max(0.0);
            // The trial force: the same contact that never slips.
            let stick = contact_dissipation(
                c.n, c.s, c.f_el, c.k_h, c.m_star, c.l_i, c.l_j, c.dv, c.w_i, c.w_j, c.xi, c.h, c.beta, 1e300, c.kappa,
            );
            let trial = (stick.f_i - c.n * (-eta_n * c.dv.dot(c.n))).length();
            let at_limit = c.mu > 0.0 && (trial - limit).abs() <= 1e-3 * limit;
            near += at_limit as usize;
            slipped += (c.mu > 0.0 && !at_limit && trial > limit) as usize;
            let pairs: Vec<(DVec3, DVec3, f64)> = if at_limit {
                vec![]
            } else {
                vec![
                    (o.f_i, want.f_i, scale),
                    (o.m_i, want.m_i, scale),
                    (o.m_j, want.m_j, scale),
                    (o.xi, want.xi, (c.xi.length() + c.h * 5.0 + 1e-3) * 4.0),
                ]
            };
            let bond_scale = 40.0 * (c.xi.length() + 1.0);
            for (a, b, s) in pairs.into_iter().chain([(g.f_i, bond.f_i, bond_scale), (g.m_i, bond.m_i, bond_scale)]) {
                assert!(a.is_finite(), "{p:?}: non-finite load {a} for {c:?}");
                worst = worst.max((a - b).length() / s);
            }
            worst = worst.max((g.m_j - bond.m_j).length() / bond_scale);
        }
        eprintln!("{p:?}: worst difference {worst:.2e} of the case's scale; {slipped} slipping, {near} at the limit");
        assert!(worst <= tol, "{p:?}: loads differ by {worst:e} of their scale");
        assert!(slipped > 300 && near < cases.len() / 5, "{p:?}: {slipped} slipping, {near} at the limit");
    }
}

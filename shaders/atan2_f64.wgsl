// atan2 for the f64 build. SPIR-V's GLSL.std.450 has no 64-bit atan, so this is Cephes' atan
// (range reduction to |z| ≤ tan(π/8) ≈ 0.414 and a degree-4/5 rational approximation, relative
// error ≈ 1e-16), with the quadrant fixed by signs. Checked against Rust's f64::atan2 by
// tests/gpu_probes.rs. atan2(±0, ±0) returns 0 and atan2(−0, x < 0) returns +π (signed zeros are
// not distinguished; the callers pass y ≥ 0).

const ATAN_P0: f64 = -8.750608600031904122785e-1;
const ATAN_P1: f64 = -1.615753718733365076637e1;
const ATAN_P2: f64 = -7.500855792314704667340e1;
const ATAN_P3: f64 = -1.228866684490136173410e2;
const ATAN_P4: f64 = -6.485021904942025371773e1;
const ATAN_Q0: f64 = 2.485846490142306297962e1;
const ATAN_Q1: f64 = 1.650270098316988542046e2;
const ATAN_Q2: f64 = 4.328810604912902668951e2;
const ATAN_Q3: f64 = 4.853903996359136964868e2;
const ATAN_Q4: f64 = 1.945506571482613964425e2;
/// π/4 split into its double value and the rest (Cephes' MOREBITS is the rest of π/2).
const ATAN_PIO4: f64 = 7.85398163397448309616e-1;
const ATAN_PIO2: f64 = 1.57079632679489661923;
const ATAN_PI: f64 = 3.14159265358979323846;
const ATAN_MOREBITS: f64 = 6.123233995736765886130e-17;

/// atan(z) for 0 ≤ z ≤ 1.
fn atan_unit(z_in: f64) -> f64 {
    var z = z_in;
    var base: f64 = 0.0;
    var extra: f64 = 0.0;
    if z > 0.66 {
        // atan(z) = π/4 + atan((z − 1)/(z + 1))
        base = ATAN_PIO4;
        extra = 0.5 * ATAN_MOREBITS;
        z = (z - 1.0) / (z + 1.0);
    }
    let zz = z * z;
    let p = (((ATAN_P0 * zz + ATAN_P1) * zz + ATAN_P2) * zz + ATAN_P3) * zz + ATAN_P4;
    let q = ((((zz + ATAN_Q0) * zz + ATAN_Q1) * zz + ATAN_Q2) * zz + ATAN_Q3) * zz + ATAN_Q4;
    let r = z * (zz * p / q) + z;
    return base + (r + extra);
}

fn atan2_real(y: real, x: real) -> real {
    let ax = abs(x);
    let ay = abs(y);
    if ax == 0.0 && ay == 0.0 {
        return 0.0;
    }
    var a: f64;
    if ay > ax {
        // atan(ay/ax) = π/2 − atan(ax/ay)
        a = ATAN_PIO2 - (atan_unit(ax / ay) - ATAN_MOREBITS);
    } else {
        a = atan_unit(ay / ax);
    }
    if x < 0.0 {
        a = (ATAN_PI - a) + 2.0 * ATAN_MOREBITS;
    }
    if y < 0.0 {
        a = -a;
    }
    return a;
}

// The interactions of MODEL §3, one pure function each, twins of src/interactions/*.rs with the
// same names, argument order and operation order. Vectors are vec3 here (function-local only).

struct ForceOut {
    energy: real,
    force: vec3<real>,
}

struct MomentOut {
    energy: real,
    moment: vec3<real>,
}

struct ShearOut {
    energy: real,
    f_i: vec3<real>,
    m_i: vec3<real>,
    m_j: vec3<real>,
}

/// Bending/torsion: with Q_ij = ΔR_j ΔR_iᵀ and θ_ij its rotation vector,
/// U^m = ½ K^m |θ_ij|², RM_i = +K^m θ_ij, RM_j = −K^m θ_ij. Returns the moment on i.
fn bending(dq_i: vec4<real>, dq_j: vec4<real>, k_bend: real) -> MomentOut {
    let theta = rotation_vector(quat_mul(dq_j, quat_conj(dq_i)));
    return MomentOut(0.5 * k_bend * dot3(theta, theta), k_bend * theta);
}

/// Axial: U^a = ½ K^a (L/L0 − 1)², F_i = −(K^a/L0)(L/L0 − 1) d̂ = −F_j, d = x_i − x_j.
fn axial(d: vec3<real>, l0: real, k_axial: real) -> ForceOut {
    let l = length3(d);
    let strain = l / l0 - 1.0;
    return ForceOut(0.5 * k_axial * strain * strain, d * (-(k_axial / l0) * strain / l));
}

/// Shear, P = I − d̂ d̂ᵀ.
/// variant 0 (paper): c = (ΔR_i d̂0)·(ΔR_j d̂), U = ½ K^s (1 − c)²,
///   F_i = K^s (1 − c) P ΔR_jᵀ ΔR_i d̂0 / L, RM_i = K^s (1 − c) (ΔR_i d̂0) × (ΔR_j d̂) = −RM_j.
/// variant 1 (objective): n_e = ΔR_e d̂0, c_e = n_e·d̂, U = ¼ K^s [(1 − c_i)² + (1 − c_j)²],
///   F_i = Σ_e ½ K^s (1 − c_e) P n_e / L, RM_e = ½ K^s (1 − c_e) n_e × d̂.
fn shear(variant: u32, d: vec3<real>, dhat0: vec3<real>, dq_i: vec4<real>, dq_j: vec4<real>, k_shear: real) -> ShearOut {
    let l = length3(d);
    let dhat = d / l;
    let n_i = quat_rotate(dq_i, dhat0);
    if variant == 0u {
        let b = quat_rotate(dq_j, dhat);
        let c = dot3(n_i, b);
        let g = 1.0 - c;
        let m_i = k_shear * g * cross3(n_i, b);
        let a = quat_rotate(quat_conj(dq_j), n_i);
        let f_i = (a - dhat * dot3(dhat, a)) * (k_shear * g / l);
        return ShearOut(0.5 * k_shear * g * g, f_i, m_i, -m_i);
    }
    let n_j = quat_rotate(dq_j, dhat0);
    let g_i = 1.0 - dot3(n_i, dhat);
    let g_j = 1.0 - dot3(n_j, dhat);
    let h = 0.5 * k_shear;
    let a = n_i * g_i + n_j * g_j;
    return ShearOut(
        0.5 * h * (g_i * g_i + g_j * g_j),
        (a - dhat * dot3(dhat, a)) * (h / l),
        h * g_i * cross3(n_i, dhat),
        h * g_j * cross3(n_j, dhat),
    );
}

/// Contact of two spheres, d = x_i − x_j, radii summing to r_sum: δ = 1 − L/r_sum,
/// U^pp = (2/5) K^pp [δ]_+^{5/2}, F_i = (K^pp/r_sum) [δ]_+^{3/2} d̂ = −F_j.
fn contact(d: vec3<real>, r_sum: real, k_contact: real) -> ForceOut {
    let l2 = dot3(d, d);
    if l2 >= r_sum * r_sum {
        return ForceOut(0.0, vec3<real>(0.0));
    }
    let l = sqrt(l2);
    let delta = 1.0 - l / r_sum;
    // Just touching: sqrt or the division may round up where they are not correctly rounded
    // (NVIDIA's Vulkan driver in f32), and sqrt(δ < 0) is NaN (the Rust twin explains).
    if delta < 0.0 {
        return ForceOut(0.0, vec3<real>(0.0));
    }
    let s = sqrt(delta);
    return ForceOut(0.4 * k_contact * delta * delta * s, d * (k_contact / r_sum * delta * s / l));
}

/// Wall through `point` with inward unit `normal`: δ = 1 − (x − p)·n / r,
/// U^pw = (2/5) K^pw [δ]_+^{5/2}, F = (K^pw/r) [δ]_+^{3/2} n, no moment.
fn wall(x: vec3<real>, r: real, point: vec3<real>, normal: vec3<real>, k_wall: real) -> ForceOut {
    let delta = 1.0 - dot3(x - point, normal) / r;
    if delta <= 0.0 {
        return ForceOut(0.0, vec3<real>(0.0));
    }
    let s = sqrt(delta);
    return ForceOut(0.4 * k_wall * delta * delta * s, normal * (k_wall / r * delta * s));
}

/// Uniform field: U = −m g·x, F = m g.
fn gravity(x: vec3<real>, m: real, g: vec3<real>) -> ForceOut {
    return ForceOut(-m * dot3(g, x), m * g);
}

/// Pendulum about a fixed pivot, b = R ρ0: U = −m g up·b, RM = m g b × up.
fn pendulum(q: vec4<real>, m: real, g: real, rho0: vec3<real>, up: vec3<real>) -> MomentOut {
    let b = quat_rotate(q, rho0);
    return MomentOut(-m * g * dot3(up, b), (m * g) * cross3(b, up));
}

/// The angle between a and b as atan2(|a × b|, a·b), never acos (accurate near 0 and π).
fn angle_between(a: vec3<real>, b: vec3<real>) -> real {
    return atan2_real(length3(cross3(a, b)), dot3(a, b));
}

/// Rupture measures of a bond (MODEL §6), in the channel order (tension, shear, bending, twist):
/// tension ε = max(L/L0 − 1, 0); shear angle φ between n_e = ΔR_e d̂0 and d̂, largest over both
/// ends (variant 1, objective), or between ΔR_i d̂0 and ΔR_j d̂ (variant 0, paper); bending
/// θ_b = |θ_ij − (θ_ij·d̂) d̂| and twist θ_t = |θ_ij·d̂|, θ_ij the rotation vector of ΔR_j ΔR_iᵀ.
fn rupture_measures(variant: u32, d: vec3<real>, l0: real, dhat0: vec3<real>, dq_i: vec4<real>,
                    dq_j: vec4<real>) -> vec4<real> {
    let l = length3(d);
    let dhat = d / l;
    let tension = max(l / l0 - 1.0, 0.0);
    let n_i = quat_rotate(dq_i, dhat0);
    var shear_angle: real;
    if variant == 0u {
        shear_angle = angle_between(n_i, quat_rotate(dq_j, dhat));
    } else {
        shear_angle = max(angle_between(n_i, dhat), angle_between(quat_rotate(dq_j, dhat0), dhat));
    }
    let theta = rotation_vector(quat_mul(dq_j, quat_conj(dq_i)));
    let along = dot3(theta, dhat);
    return vec4<real>(tension, shear_angle, length3(theta - along * dhat), abs(along));
}

/// An upper bound of angle_between(a, b) without atan2: atan2(y, x) ≤ min(y/x, π/2) for
/// x > 0, else ≤ π; widened by `slack` (relative and absolute). See `rupture_bounds`.
fn angle_bound(a: vec3<real>, b: vec3<real>, slack: real) -> real {
    let y = length3(cross3(a, b));
    let x = dot3(a, b);
    var bound = real(RUPTURE_PI);
    if x > 0.0 {
        bound = real(RUPTURE_PI / 2.0);
        if y < real(RUPTURE_PI / 2.0) * x {
            bound = y / x;
        }
    }
    return bound * (1.0 + slack) + slack;
}

/// Upper bounds of the four measures rupture_measures computes, componentwise, without atan2,
/// widened by `slack` to cover rounding (RUPTURE_SLACK of this precision): the rotation vector
/// θ = f u of the canonical Q_ij = (u, w) has f ≤ min(2/w, π/|u|). The Rust twin explains why
/// a bond whose bounds hold also holds on its measures.
fn rupture_bounds(variant: u32, d: vec3<real>, l0: real, dhat0: vec3<real>, dq_i: vec4<real>,
                  dq_j: vec4<real>, slack: real) -> vec4<real> {
    let l = length3(d);
    let dhat = d / l;
    let tension = max(l / l0 - 1.0, 0.0);
    let n_i = quat_rotate(dq_i, dhat0);
    var shear_bound: real;
    if variant == 0u {
        shear_bound = angle_bound(n_i, quat_rotate(dq_j, dhat), slack);
    } else {
        shear_bound = max(angle_bound(n_i, dhat, slack), angle_bound(quat_rotate(dq_j, dhat0), dhat, slack));
    }
    var q = quat_mul(dq_j, quat_conj(dq_i));
    if q.w < 0.0 {
        q = -q;
    }
    let u = q.xyz;
    let s = length3(u);
    var f_max: real;
    if 2.0 * s <= real(RUPTURE_PI) * q.w {
        f_max = 2.0 / q.w;
    } else {
        f_max = real(RUPTURE_PI) / s;
    }
    f_max = f_max * (1.0 + slack);
    let along = dot3(u, dhat);
    return vec4<real>(tension * (1.0 + slack) + slack, shear_bound, f_max * (length3(u - along * dhat) + slack * s),
                      f_max * (abs(along) + slack * s));
}

/// Twin of `interactions::rupture::released_energy`: what a bond that breaks books into
/// `E_released`, `u + ½ h (F_i·dv + RM_i·Ω_i + RM_j·Ω_j)` (h = 0 at the initial evaluation).
fn released_energy(u: real, f_i: vec3<real>, m_i: vec3<real>, m_j: vec3<real>, dv: vec3<real>, w_i: vec3<real>,
                   w_j: vec3<real>, h: real) -> real {
    return u + 0.5 * h * (dot(f_i, dv) + dot(m_i, w_i) + dot(m_j, w_j));
}

/// Whether (and in which channel, −1: it holds) a bond breaks: rupture(rupture_measures(..)),
/// decided first on rupture_bounds so that bonds far from breaking skip the atan2s.
fn bond_breaks(variant: u32, d: vec3<real>, l0: real, dhat0: vec3<real>, dq_i: vec4<real>, dq_j: vec4<real>,
               inv_thresholds: vec4<real>, scale: real, sum: bool, slack: real) -> i32 {
    let bounds = rupture_bounds(variant, d, l0, dhat0, dq_i, dq_j, slack);
    // A bound that is not finite (a degenerate bond) proves nothing: measure it.
    let finite = finite_real(bounds.x) && finite_real(bounds.y) && finite_real(bounds.z) && finite_real(bounds.w);
    if finite && rupture(bounds, inv_thresholds, scale, sum) < 0 {
        return -1;
    }
    return rupture(rupture_measures(variant, d, l0, dhat0, dq_i, dq_j), inv_thresholds, scale, sum);
}

/// The rupture rule: ratios r_c = measure_c · inv_threshold_c / scale; the bond breaks when
/// max_c r_c ≥ 1 (`sum` false) or Σ_c r_c ≥ 1 (`sum` true). Returns the channel with the largest
/// ratio (lowest index on ties) when it breaks, −1 when it holds (Rust: `None`).
fn rupture(measures: vec4<real>, inv_thresholds: vec4<real>, scale: real, sum: bool) -> i32 {
    var total: real = 0.0;
    var best = 0;
    var best_r: real = -1.0;
    for (var c = 0; c < 4; c++) {
        let r = measures[c] * inv_thresholds[c] / scale;
        total = total + r;
        if r > best_r {
            best_r = r;
            best = c;
        }
    }
    var reached = best_r >= 1.0;
    if sum {
        reached = total >= 1.0;
    }
    if reached {
        return best;
    }
    return -1;
}

/// Twin of `interactions::damping::hertz_constant`: k_H = K r_sum^{−5/2}, the elastic normal
/// force being k_H s^{3/2} at overlap s.
fn hertz_constant(k: real, r_sum: real) -> real {
    return k / (r_sum * r_sum * sqrt(r_sum));
}

/// Dissipative loads of one contact (`contact_dissipation`): force on i (−f_i on j), spatial
/// moments on i and j, and the contact's new tangential displacement ξ.
struct ContactLoad {
    f_i: vec3<real>,
    m_i: vec3<real>,
    m_j: vec3<real>,
    xi: vec3<real>,
}

/// Twin of `interactions::damping::contact_dissipation` (MODEL §10), same arguments: n unit
/// normal from j to i; s > 0 overlap; f_el = k_H s^{3/2}; m_star reduced mass; l_i, l_j arms
/// to the contact point; dv = v_i − v_j; w_i, w_j spatial angular velocities; xi the history.
/// Dashpot F_i = −η_n (dv·n) n, η_n = √5 β sqrt(m* k_H) s^{1/4}; with μ > 0 the spring–slider:
/// u = dv − (l_i Ω_i + l_j Ω_j) × n, v_t = u − (u·n) n, ξ turned into the tangent plane keeping
/// its length then ξ += h v_t, k_t = κ (3/2) k_H s^{1/2}, η_t = √κ η_n, F* = −k_t ξ − η_t v_t,
/// F_n = max(0, f_el − η_n dv·n); |F*| > μ F_n slips: F_t = μ F_n F*/|F*|, ξ = −(F_t + η_t v_t)/k_t.
/// Loads F_i += F_t, RM_i = −l_i n × F_t, RM_j = −l_j n × F_t.
fn contact_dissipation(n: vec3<real>, s: real, f_el: real, k_h: real, m_star: real, l_i: real, l_j: real,
                       dv: vec3<real>, w_i: vec3<real>, w_j: vec3<real>, xi: vec3<real>, h: real, beta: real,
                       mu: real, kappa: real) -> ContactLoad {
    let zero = vec3<real>(0.0);
    let v_n = dot3(dv, n);
    // √5 through a variable: naga does not fold sqrt of an f64 constant.
    var five: real = 5.0;
    let eta_n = sqrt(five) * beta * sqrt(m_star * k_h) * sqrt(sqrt(s));
    var f_i = n * (-eta_n * v_n);
    if mu <= 0.0 {
        return ContactLoad(f_i, zero, zero, zero);
    }
    let u = dv - cross3(w_i * l_i + w_j * l_j, n);
    let v_t = u - n * dot3(u, n);
    let len = length3(xi);
    let flat = xi - n * dot3(xi, n);
    let flat_len = length3(flat);
    var x = zero;
    if flat_len > 0.0 {
        x = flat * (len / flat_len);
    }
    x = x + v_t * h;
    let k_t = kappa * 1.5 * k_h * sqrt(s);
    let eta_t = sqrt(kappa) * eta_n;
    let trial = -(x * k_t) - v_t * eta_t;
    let f_n = max(f_el - eta_n * v_n, 0.0);
    let limit = mu * f_n;
    let size = length3(trial);
    var f_t = trial;
    if size > limit {
        f_t = trial * (limit / size);
        x = -(f_t + v_t * eta_t) / k_t;
    }
    f_i = f_i + f_t;
    let arm = cross3(n, f_t);
    return ContactLoad(f_i, arm * -l_i, arm * -l_j, x);
}

/// Loads of a viscous binder bond (`binder_damping`): force on i (−f_i on j), moments on i, j.
struct BondDamping {
    f_i: vec3<real>,
    m_i: vec3<real>,
    m_j: vec3<real>,
}

/// Twin of `interactions::damping::binder_damping` (MODEL §10): d = x_i − x_j, dv = v_i − v_j,
/// gamma = (γ_a, γ_s, γ_b, γ_t); w = dv − ½ (Ω_i + Ω_j) × d, F_i = −γ_a (w·d̂) d̂ − γ_s w_⊥,
/// shear couple RM_i = RM_j = −½ d × F^(s); with ω = Ω_i − Ω_j, RM_i = −γ_b ω_⊥ − γ_t (ω·d̂) d̂
/// = −RM_j on top.
fn binder_damping(d: vec3<real>, dv: vec3<real>, w_i: vec3<real>, w_j: vec3<real>, gamma: vec4<real>) -> BondDamping {
    let len = length3(d);
    if len <= 0.0 {
        return BondDamping(vec3<real>(0.0), vec3<real>(0.0), vec3<real>(0.0));
    }
    let dh = d / len;
    let w = dv - cross3((w_i + w_j) * 0.5, d);
    let w_a = dot3(w, dh);
    let f_s = (w - dh * w_a) * -gamma.y;
    let f_i = dh * (-gamma.x * w_a) + f_s;
    let couple = cross3(d, f_s) * -0.5;
    let om = w_i - w_j;
    let om_a = dot3(om, dh);
    let rot = (om - dh * om_a) * -gamma.z - dh * (gamma.w * om_a);
    return BondDamping(f_i, couple + rot, couple - rot);
}

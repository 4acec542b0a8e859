// Finiteness test for the f64 build, on exponent bits (see finite_f32.wgsl for why not on
// comparisons). WGSL's `bitcast` keeps the width, so f64 → vec2<u32> is not expressible (naga
// lowers it to a u64 cast, which needs SHADER_INT64). Instead the value is scaled by 2^-1000,
// exactly (a power of two; the largest f64, < 2^1024, becomes < 2^24 and tiny values become 0,
// both finite), and converted to f32, which keeps NaN and ±inf; the f32 exponent bits then
// tell. Checked against f64::is_finite on the device by tests/gpu_probes.rs.

const EXP_MASK_F32: u32 = 0x7f800000u;
/// 2^-1000 (the shortest decimal that parses to it exactly).
const FINITE_SCALE: f64 = 9.332636185032189e-302;

fn finite_real(x: real) -> bool {
    return (bitcast<u32>(f32(x * FINITE_SCALE)) & EXP_MASK_F32) != EXP_MASK_F32;
}

fn finite3(v: vec3<real>) -> bool {
    let b = bitcast<vec3<u32>>(vec3<f32>(v * FINITE_SCALE));
    return all((b & vec3<u32>(EXP_MASK_F32)) != vec3<u32>(EXP_MASK_F32));
}

fn finite4(v: vec4<real>) -> bool {
    let b = bitcast<vec4<u32>>(vec4<f32>(v * FINITE_SCALE));
    return all((b & vec4<u32>(EXP_MASK_F32)) != vec4<u32>(EXP_MASK_F32));
}

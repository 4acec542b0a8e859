// Finiteness test for the f32 build, on the exponent bits: WGSL lets an implementation assume
// that no NaN or infinity occurs, so `x != x` or `abs(x) <= MAX` may be folded to a constant;
// a bit pattern cannot be. NaN and ±inf are the values whose exponent bits are all ones.

const EXP_MASK_F32: u32 = 0x7f800000u;

fn finite_real(x: real) -> bool {
    return (bitcast<u32>(x) & EXP_MASK_F32) != EXP_MASK_F32;
}

fn finite3(v: vec3<real>) -> bool {
    return all((bitcast<vec3<u32>>(v) & vec3<u32>(EXP_MASK_F32)) != vec3<u32>(EXP_MASK_F32));
}

fn finite4(v: vec4<real>) -> bool {
    return all((bitcast<vec4<u32>>(v) & vec4<u32>(EXP_MASK_F32)) != vec4<u32>(EXP_MASK_F32));
}

// atan2 for the f32 build: the builtin is accurate to a few ulp in f32.

fn atan2_real(y: real, x: real) -> real {
    return atan2(y, x);
}

// atan2 for the f32 build: the builtin (its accuracy is the driver's; lavapipe's is within
// ~14 ulp of π, checked by tests/gpu_probes.rs).

fn atan2_real(y: real, x: real) -> real {
    return atan2(y, x);
}

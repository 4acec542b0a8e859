// Test kernel: atan2_real over a list of (y, x) pairs, compared with Rust's f64::atan2 by
// tests/gpu_atan2.rs.

@group(3) @binding(0) var<storage, read_write> atan_in: array<vec2<real>>;
@group(3) @binding(1) var<storage, read_write> atan_out: array<real>;

@compute @workgroup_size(WG)
fn atan2_test(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wid, nwg, lid, WG);
    if i < arrayLength(&atan_out) {
        let a = atan_in[i];
        atan_out[i] = atan2_real(a.x, a.y);
    }
}

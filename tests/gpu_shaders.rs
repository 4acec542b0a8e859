//! Adapter-free checks of the WGSL: every kernel file composed for f32 and f64 parses and
//! validates with naga, and the uniform/storage structs have the size their Rust mirrors have.

use rrpdem::engine::Precision;
use rrpdem::gpu::params::{SimParams32, SimParams64, WallGpu32, WallGpu64};
use rrpdem::gpu::shader::{KERNEL_FILES, compose_and_validate, struct_size};

#[test]
fn every_kernel_validates_in_both_precisions() {
    for file in KERNEL_FILES {
        for p in [Precision::F32, Precision::F64] {
            let c = compose_and_validate(file, p).unwrap_or_else(|e| panic!("{e}"));
            for entry in file.entry_points {
                assert!(c.uses.contains_key(*entry), "{}: {entry} not reflected", file.name);
            }
        }
    }
}

#[test]
fn struct_layouts_match_rust_mirrors() {
    let c32 = compose_and_validate(&KERNEL_FILES[0], Precision::F32).unwrap();
    let c64 = compose_and_validate(&KERNEL_FILES[0], Precision::F64).unwrap();
    assert_eq!(struct_size(&c32.module, "SimParams"), Some(size_of::<SimParams32>() as u32));
    assert_eq!(struct_size(&c64.module, "SimParams"), Some(size_of::<SimParams64>() as u32));
    assert_eq!(struct_size(&c32.module, "WallGpu"), Some(size_of::<WallGpu32>() as u32));
    assert_eq!(struct_size(&c64.module, "WallGpu"), Some(size_of::<WallGpu64>() as u32));
    // BondOutGpu: three vec4 of reals, as the host sizes `bond_out`.
    assert_eq!(struct_size(&c32.module, "BondOutGpu"), Some(48));
    assert_eq!(struct_size(&c64.module, "BondOutGpu"), Some(96));
}

#[test]
fn the_particle_kernel_binds_what_the_context_provisions() {
    // The widest kernel must fit STORAGE_BUFFERS_NEEDED storage bindings.
    let file = KERNEL_FILES.iter().find(|f| f.name == "particle").unwrap();
    let c = compose_and_validate(file, Precision::F64).unwrap();
    let storage = c.uses["particle"].iter().filter(|u| u.name != "params").count() as u32;
    assert!(storage <= rrpdem::gpu::context::STORAGE_BUFFERS_NEEDED, "particle kernel uses {storage} storage buffers");
}

//! Adapter-free checks of the WGSL: every kernel file composed for f32 and f64 parses and
//! validates with naga, and the uniform/storage structs have the size and the field offsets
//! their Rust mirrors have.

use rrpdem::engine::Precision;
use rrpdem::gpu::params::{ReplicaGpu32, ReplicaGpu64, SimParams32, SimParams64, WallGpu32, WallGpu64};
use rrpdem::gpu::shader::{KERNEL_FILES, compose_and_validate, struct_offsets, struct_size};
use std::mem::offset_of;

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
    assert_eq!(struct_size(&c32.module, "ReplicaGpu"), Some(size_of::<ReplicaGpu32>() as u32));
    assert_eq!(struct_size(&c64.module, "ReplicaGpu"), Some(size_of::<ReplicaGpu64>() as u32));
    assert_eq!(struct_size(&c32.module, "WallGpu"), Some(size_of::<WallGpu32>() as u32));
    assert_eq!(struct_size(&c64.module, "WallGpu"), Some(size_of::<WallGpu64>() as u32));
    // BondOutGpu: three vec4 of reals, as the host sizes `bond_out`.
    assert_eq!(struct_size(&c32.module, "BondOutGpu"), Some(48));
    assert_eq!(struct_size(&c64.module, "BondOutGpu"), Some(96));
}

#[test]
fn every_kernel_binds_what_the_context_provisions() {
    // Each kernel (the particle kernel is the widest; the bond kernel grew with rupture) must fit
    // the STORAGE_BUFFERS_NEEDED storage bindings the device is opened with.
    for file in KERNEL_FILES {
        let c = compose_and_validate(file, Precision::F64).unwrap();
        for entry in file.entry_points {
            let storage = c.uses[*entry]
                .iter()
                .filter(|u| !["params", "red_len", "scan_len", "chunk"].contains(&u.name.as_str()))
                .count() as u32;
            assert!(storage <= rrpdem::gpu::context::STORAGE_BUFFERS_NEEDED, "{entry} uses {storage} storage buffers");
        }
    }
}

#[test]
fn per_particle_arrays_in_two_parts_stay_within_the_storage_bindings_provisioned() {
    use rrpdem::gpu::context::{STORAGE_BUFFERS_NEEDED, STORAGE_BUFFERS_NEEDED_PARTS};
    use rrpdem::gpu::shader::{DLOAD_ARRAYS, PARTED, PARTICLE_OWN, Parts, WHOLE_ONLY, compose_and_validate_parts};
    let storage = |uses: &[rrpdem::gpu::shader::UsedBinding]| {
        uses.iter().filter(|u| !["params", "red_len", "scan_len", "chunk"].contains(&u.name.as_str())).count() as u32
    };
    for p in [Precision::F32, Precision::F64] {
        let mut widest = [0u32; 2];
        for file in KERNEL_FILES {
            let one = compose_and_validate_parts(file, p, Parts::One).unwrap_or_else(|e| panic!("{e}"));
            let two = compose_and_validate_parts(file, p, Parts::Two).unwrap_or_else(|e| panic!("{e}"));
            for entry in file.entry_points {
                // Whole arrays: no second part bound, so the kernels bind what they did.
                assert!(!one.uses[*entry].iter().any(|u| u.name.ends_with("_hi")), "{entry}: {:?}", one.uses[*entry]);
                // Every other access goes through the accessors, which touch both parts: a
                // kernel binding one part of an array without the other indexes it directly
                // (its particles beyond the first part would read the wrong element).
                for (base, ..) in PARTED {
                    let has = |name: &str| two.uses[*entry].iter().any(|u| u.name == name);
                    let own = *entry == "particle" && PARTICLE_OWN.contains(&base);
                    if has(base) && !own {
                        assert!(has(&format!("{base}_hi")), "{entry} indexes `{base}` without its accessor");
                    }
                }
                for u in two.uses[*entry].iter().filter(|u| u.name.ends_with("_hi")) {
                    let base = u.name.trim_end_matches("_hi");
                    // A second part comes with its first, declared where the generator says.
                    assert!(two.uses[*entry].iter().any(|v| v.name == base), "{entry}: {} alone", u.name);
                    let (_, _, g, b) = PARTED.iter().find(|x| x.0 == base).unwrap();
                    assert_eq!((u.group, u.binding), (*g, *b), "{entry}: {}", u.name);
                    // The particle kernel binds its own particle's arrays as one part.
                    assert!(!(*entry == "particle" && PARTICLE_OWN.contains(&base)), "particle binds {}", u.name);
                }
                // Nothing dissipates in two parts: no kernel built for them binds the loads.
                if !WHOLE_ONLY.contains(entry) {
                    let dload = two.uses[*entry].iter().find(|u| DLOAD_ARRAYS.contains(&u.name.as_str()));
                    assert!(dload.is_none(), "{entry} binds {dload:?} in two parts");
                }
                widest[0] = widest[0].max(storage(&one.uses[*entry]));
                // Kernels built for whole arrays only (dissipation is refused in two parts).
                if !WHOLE_ONLY.contains(entry) {
                    widest[1] = widest[1].max(storage(&two.uses[*entry]));
                }
            }
        }
        // The constants are the widest kernel's counts, not merely bounds.
        assert_eq!(widest, [STORAGE_BUFFERS_NEEDED, STORAGE_BUFFERS_NEEDED_PARTS], "{p:?}");
        // Lavapipe allows 32 per stage: two parts must run there.
        const { assert!(STORAGE_BUFFERS_NEEDED_PARTS <= 32) };
    }
}

/// (WGSL member name, Rust offset) for every field of a Rust mirror; a padding array `_pad_x:
/// [T; k]` stands for the WGSL members `_pad_x0` … `_pad_x{k-1}`.
macro_rules! rust_offsets {
    ($ty:ty, $real:ty; $($field:ident),*; $($pad:ident: $count:expr, $elem:ty),*) => {{
        let mut v: Vec<(String, u32)> = vec![$((stringify!($field).to_string(), offset_of!($ty, $field) as u32)),*];
        $(for k in 0..$count {
            v.push((format!("{}{k}", stringify!($pad)), (offset_of!($ty, $pad) + k * size_of::<$elem>()) as u32));
        })*
        v.sort_by_key(|(_, o)| *o);
        v
    }};
}

macro_rules! sim_params_offsets {
    ($ty:ty, $real:ty) => {
        rust_offsets!($ty, $real;
            h, n_particles, n_bonds, mask, integrator, batch_len, n_replicas, part_len, keep_dload, grid_fast,
            grid_phase;
            _pad_r: 3, $real, _pad_g: 2, u32)
    };
}

macro_rules! replica_offsets {
    ($ty:ty, $real:ty) => {
        rust_offsets!($ty, $real;
            gravity, pend_rho0, pend_up, rupture_inv, binder_gamma, damping, k_bend, k_axial, k_shear, k_contact,
            k_wall, inv_cell, pend_g, skin, half_skin_sq, cell_edge, stiffness_ratio, early_skin_sq, p_start, n_particles,
            b_start, n_bonds, wall_start, n_walls, shear_variant, flags, rupture_sum, broken_word, wall_slots,
            grid_phase;
            _pad_u: 4, u32)
    };
}

#[test]
fn every_struct_field_has_the_offset_of_its_rust_mirror() {
    // Sizes alone would not notice two fields of the same type swapped in one of the two
    // declarations (k_axial and k_shear, say): every member's offset is compared.
    for (p, sim, rep, wall) in [
        (
            Precision::F32,
            sim_params_offsets!(SimParams32, f32),
            replica_offsets!(ReplicaGpu32, f32),
            rust_offsets!(WallGpu32, f32; point, normal, block; _pad_b: 4, i32),
        ),
        (
            Precision::F64,
            sim_params_offsets!(SimParams64, f64),
            replica_offsets!(ReplicaGpu64, f64),
            rust_offsets!(WallGpu64, f64; point, normal, block; _pad_b: 4, i32),
        ),
    ] {
        let c = compose_and_validate(&KERNEL_FILES[0], p).unwrap();
        assert_eq!(struct_offsets(&c.module, "SimParams").unwrap(), sim, "{p:?}: SimParams");
        assert_eq!(struct_offsets(&c.module, "ReplicaGpu").unwrap(), rep, "{p:?}: ReplicaGpu");
        assert_eq!(struct_offsets(&c.module, "WallGpu").unwrap(), wall, "{p:?}: WallGpu");
        use rrpdem::gpu::chunks::ChunkGpu;
        let chunk = rust_offsets!(ChunkGpu, u32;
            p_first, p_end, b_first, b_end, bond_win, inc_win, nbr_win, group_base, fill_first, fill_end, part_win,
            hist_win;);
        assert_eq!(struct_offsets(&c.module, "ChunkGpu").unwrap(), chunk, "{p:?}: ChunkGpu");
        assert_eq!(struct_size(&c.module, "ChunkGpu"), Some(size_of::<ChunkGpu>() as u32));
        // BondOutGpu has no Rust struct: the host reads nothing of it but sizes it as three
        // vec4 of reals (f_i, m_i, m_j) per bond.
        let v4 = 4 * rrpdem::gpu::sizes::real_size(p) as u32;
        let bond: Vec<(String, u32)> =
            [("f_i", 0), ("m_i", v4), ("m_j", 2 * v4)].map(|(n, o)| (n.to_string(), o)).into();
        assert_eq!(struct_offsets(&c.module, "BondOutGpu").unwrap(), bond, "{p:?}: BondOutGpu");
    }
    // The watch of each replica (shaders/watch.wgsl), in both precisions.
    let watch = |p| {
        let file = KERNEL_FILES.iter().find(|f| f.name == "watch").unwrap();
        compose_and_validate(file, p).unwrap()
    };
    use rrpdem::gpu::watch::{WatchGpu32, WatchGpu64};
    macro_rules! watch_offsets {
        ($ty:ty) => {
            rust_offsets!($ty, f32;
                e0, limit, scale, max_dev, released, peak, vn_sep, mass, normal, max_step, first, last, peak_step,
                sep_step, trip_step, episodes, observed;)
        };
    }
    let c = watch(Precision::F32);
    assert_eq!(struct_offsets(&c.module, "WatchGpu").unwrap(), watch_offsets!(WatchGpu32), "f32: WatchGpu");
    assert_eq!(struct_size(&c.module, "WatchGpu"), Some(size_of::<WatchGpu32>() as u32));
    let c = watch(Precision::F64);
    assert_eq!(struct_offsets(&c.module, "WatchGpu").unwrap(), watch_offsets!(WatchGpu64), "f64: WatchGpu");
    assert_eq!(struct_size(&c.module, "WatchGpu"), Some(size_of::<WatchGpu64>() as u32));
}

/// The bytes per element the host writes, reads and binds (by byte offset) each bound variable
/// with, in terms of the host's own sizes (`gpu::sizes`, `gpu::shader::parted_elem`, the mirrors'
/// sizes): what each kernel's declaration must lay out.
fn host_elem_sizes(p: Precision) -> Vec<(String, u32)> {
    use rrpdem::gpu::chunks::ChunkGpu;
    use rrpdem::gpu::params::{replica_gpu_size, wall_gpu_size};
    use rrpdem::gpu::shader::{PARTED, parted_elem};
    use rrpdem::gpu::sizes::{CELL_BYTES, bond_out_elem, real_size};
    let rs = real_size(p) as u32;
    let params = match p {
        Precision::F32 => size_of::<SimParams32>(),
        Precision::F64 => size_of::<SimParams64>(),
    } as u32;
    let mut v: Vec<(String, u32)> = Vec::new();
    // The per-particle vec4 arrays and their second parts, bound at `parted_elem` offsets.
    for (name, ..) in PARTED {
        let e = parted_elem(name, p).unwrap() as u32;
        v.push((name.to_string(), e));
        v.push((format!("{name}_hi"), e));
    }
    // u32 words the host fills from `&[u32]` or reads as such (status, counts, offsets, the
    // indirect arguments: three words per dispatch).
    for name in [
        "fixed",
        "hash",
        "slot",
        "sorted_tmp",
        "bucket_start",
        "bucket_count",
        "status",
        "step_next",
        "nbr",
        "nbr_count",
        "nbr_offsets",
        "inc_offsets",
        "inc_entries",
        "inc_peer",
        "bonded",
        "halo_off",
        "halo_src",
        "halo_fill",
        "bond_broken",
        "grid_args",
        "grid_full",
        "scan_data",
        "scan_sums",
        "hash_out",
        "finite_out",
        "watch_flags",
    ] {
        v.push((name.to_string(), 4));
    }
    v.extend(
        [
            // Per bond: the ends (two u32), the reference direction and length (a vec4), the
            // two reference attitudes (two vec4: bond k's at 2k, 2k + 1), the threshold scale,
            // the results (the halo holds copies of them).
            ("bond_ends", 8),
            ("bond_ref", 4 * rs),
            ("bond_q0", 4 * rs),
            ("bond_scale", rs),
            ("bond_out", bond_out_elem(p) as u32),
            ("halo", bond_out_elem(p) as u32),
            // Break records: (midpoint, energy) reals and (bond, step, channel, _) words.
            ("break_at", 4 * rs),
            ("break_id", 16),
            // Reduction: records of NQ reals, table entries of four u32, a uniform of four u32.
            ("red_in", rs),
            ("red_out", rs),
            ("red_table", 16),
            ("red_len", 16),
            // The watch: records of NW reals, table entries and a uniform of four u32, one
            // `WatchGpu` and one flags word per replica.
            ("watch_in", rs),
            ("watch_out", rs),
            ("watch_table", 16),
            ("watch_len", 16),
            ("watch", rrpdem::gpu::watch::watch_gpu_size(p) as u32),
            // The skin rule's anchor displacement, a vec4 per replica (plan.rs allocates 4 reals).
            ("drift", 4 * rs),
            ("scan_len", 16),
            ("params", params),
            ("reps", replica_gpu_size(p) as u32),
            ("walls", wall_gpu_size(p) as u32),
            ("chunk", size_of::<ChunkGpu>() as u32),
            // Probes (`gpu::probes`): (y, x) pairs, cells with the mask, values, 16 and 4 reals
            // per case.
            ("atan_in", 2 * rs),
            ("atan_out", rs),
            ("hash_in", 16),
            ("finite_in", rs),
            ("rupture_in", 4 * rs),
            ("rupture_out", rs),
            ("arith_in", 4 * rs),
            ("arith_out", 4 * rs),
            ("damp_in", 4 * rs),
            ("damp_out", 4 * rs),
            ("dload_force", 4 * rs),
            ("dload_moment", 4 * rs),
            ("dload_wall", 4 * rs),
            ("hist_count", 4),
            ("hist_key", 4),
            ("hist_xi", 4 * rs),
            ("inc_xi", 4 * rs),
            ("whist", 4 * rs),
        ]
        .map(|(n, e)| (n.to_string(), e)),
    );
    assert_eq!(CELL_BYTES as u32, parted_elem("cell", p).unwrap() as u32);
    v
}

#[test]
fn every_bound_variable_has_the_element_size_the_host_gives_it() {
    // The structs' offsets are checked above; this holds every array the host fills, reads or
    // binds in parts against the kernels' declarations, in both precisions and both ways of
    // binding the per-particle arrays, and makes sure no binding is left out of the list.
    use rrpdem::gpu::shader::{Parts, binding_elem_size, compose_and_validate_parts};
    for p in [Precision::F32, Precision::F64] {
        let host = host_elem_sizes(p);
        let mut seen = std::collections::BTreeSet::new();
        for parts in [Parts::One, Parts::Two] {
            for file in KERNEL_FILES {
                let c = compose_and_validate_parts(file, p, parts).unwrap();
                for (_, var) in c.module.global_variables.iter().filter(|(_, g)| g.binding.is_some()) {
                    let name = var.name.clone().unwrap_or_default();
                    let Some((_, want)) = host.iter().find(|(n, _)| *n == name) else {
                        panic!("{}: binding `{name}` has no host element size in this test", file.name);
                    };
                    let got = binding_elem_size(&c.module, &name).unwrap();
                    assert_eq!(got, *want, "{p:?} {}: `{name}`", file.name);
                    seen.insert(name);
                }
            }
        }
        // And no host entry names a binding that does not exist.
        for (name, _) in &host {
            assert!(seen.contains(name), "{p:?}: `{name}` is bound by no kernel");
        }
    }
}

#[test]
fn every_wgsl_struct_is_mirrored_and_checked_or_internal() {
    // A struct added to the shaders must either get a Rust mirror checked above, or be one
    // that lives only inside the kernels (the interaction functions' return values).
    let checked = ["SimParams", "ReplicaGpu", "WallGpu", "ChunkGpu", "BondOutGpu", "WatchGpu"];
    let internal = [
        "ForceOut",
        "MomentOut",
        "ShearOut",
        "ContactLoad",
        "BondDamping",
        "GridWalk",
        "ListWalk",
        "PairWalk",
        "PairPartner",
        "PairContact",
    ];
    for p in [Precision::F32, Precision::F64] {
        for file in KERNEL_FILES {
            let c = compose_and_validate(file, p).unwrap();
            for (_, t) in c.module.types.iter() {
                if let (naga::TypeInner::Struct { .. }, Some(name)) = (&t.inner, t.name.as_deref())
                    && !name.starts_with("__")
                {
                    assert!(
                        checked.contains(&name) || internal.contains(&name),
                        "{}: struct `{name}` unchecked",
                        file.name
                    );
                }
            }
        }
    }
}

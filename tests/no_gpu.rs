//! Behaviour that holds on every machine: detection gives a typed answer, never a panic, and the embedded
//! module matches the manifest.
use megamoe::{manifest, Error};

#[test]
fn detection_is_a_typed_result() {
    match megamoe::gpu(0) {
        Ok(g) => assert!(g.sm_count() > 0),
        Err(Error::NoDriver | Error::NoDevice { .. } | Error::UnsupportedDevice { .. }) => {}
        Err(e) => panic!("unexpected error from detection: {e}"),
    }
    // an ordinal far past any machine's devices is an error, not a panic
    assert!(megamoe::gpu(4096).is_err());
}

#[test]
fn embedded_ptx_exports_every_manifest_kernel_with_its_bounds() {
    let ptx = megamoe::kernels::IMAGE.ptx;
    assert!(ptx.contains(".target sm_90a"), "PTX is not for sm_90a");
    for k in manifest::KERNELS {
        let at = ptx.find(&format!(".entry {}(", k.name)).unwrap_or_else(|| panic!("{} missing from the PTX", k.name));
        if k.max_threads > 0 {
            let body = &ptx[at..at + ptx[at..].find('{').unwrap()];
            assert!(body.contains(&format!(".maxntid {}, 1, 1", k.max_threads)), "{} lacks .maxntid", k.name);
        }
    }
}

#[test]
fn embedded_cubin_is_an_elf_when_present() {
    let c = megamoe::kernels::IMAGE.cubin;
    // `cargo xtask test` installs ptxas and sets MEGAMOE_REQUIRE_CUBIN: there the cubin must exist
    if std::env::var_os("MEGAMOE_REQUIRE_CUBIN").is_some() {
        assert!(!c.is_empty(), "built without ptxas");
        assert!(megamoe::kernels::IMAGE.ptxas_report.contains("Function properties"));
    }
    if !c.is_empty() {
        assert_eq!(&c[..4], b"\x7fELF");
    }
}

/// Programmatic dependent launch (`MEGAMOE_PDL=on`) is given only to kernels whose entry waits for their
/// predecessors (`megamoe::ptx_entry_waits`, the host's scan): every kernel of the layer's chains has the wait, and
/// before any global memory access of its own (the wait's `asm!` is a memory clobber, so no access moves above
/// it); the expert-parallel and self-test kernels have none and always launch plainly.
#[test]
fn the_layer_kernels_wait_for_their_predecessors_before_any_global_access() {
    let ptx = megamoe::kernels::IMAGE.ptx;
    for k in manifest::KERNELS {
        let chain = !(k.name.starts_with("selftest_") || k.name.starts_with("ep_"));
        assert_eq!(megamoe::ptx_entry_waits(ptx, k.name), chain, "{}: griddepcontrol.wait", k.name);
        if !chain {
            continue;
        }
        let head = format!(".entry {}(", k.name);
        let body = &ptx[ptx.find(&head).unwrap()..];
        let body = &body[..body[head.len()..].find(".entry ").map_or(body.len(), |e| e + head.len())];
        let wait = body.find("griddepcontrol.wait").unwrap();
        for access in ["ld.global", "st.global", "atom.", "red.", "cp.async", "ld.volatile", "ld.acquire", "ld.relaxed"]
        {
            if let Some(at) = body.find(access) {
                assert!(wait < at, "{}: {access} before griddepcontrol.wait", k.name);
            }
        }
    }
}

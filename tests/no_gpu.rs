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

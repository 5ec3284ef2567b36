//! # megamoe
//!
//! Fused Mixture-of-Experts GPU kernels for training, written in Rust, device code included.
//!
//! This crate is the public API. Today it offers the foundation the layer is built on:
//! - [`gpu`]: open a Hopper GPU with megamoe's kernels (a typed [`Error`], never a panic, without one);
//! - [`reference`](mod@reference): the f64 CPU reference of the whole MoE layer, forward and backward, for R ranks;
//! - [`selftest`]: each Hopper primitive of the kernels crate run alone and checked;
//! - [`kernels::IMAGE`]: the embedded PTX, cubin and ptxas report, built by `build.rs` from `kernels-gpu/`.
//!
//! ```no_run
//! let gpu = megamoe::gpu(0)?; // Err(Error::NoDriver) on a machine without an NVIDIA driver
//! let mut rng = megamoe::rng::Rng::new(megamoe::rng::Rng::fresh_seed());
//! let err = megamoe::selftest::wgmma(&gpu, &mut rng, 128, false)?;
//! assert!(err < 1e-5);
//! # Ok::<(), megamoe::Error>(())
//! ```
use std::sync::Arc;

pub use megamoe_host::runtime::{pdl_enabled, ptx_entry_waits, with_pdl, Gpu, Image, Launch, LaunchTime};
pub use megamoe_host::{
    check, ep, fp8, gemm, layer, matmul64, reference, rng, route, selftest, tensor_map, tiles, Error, Result,
};
/// The expert-parallel layout math shared with the kernels (owners, receive rows, the symmetric workspace, phases).
pub use megamoe_kernels::ep as ep_layout;
/// The routing layout's chunking math and its CPU models (what `route_fused`, and `route_count`, `route_scan`,
/// `route_place`, compute).
pub use megamoe_kernels::route as route_layout;
pub use megamoe_kernels::{desc, manifest, params, swizzle};

/// The kernels of this build, embedded by `build.rs`.
pub mod kernels {
    use super::Image;

    /// PTX, cubin (empty when ptxas was absent at build time) and ptxas report of `kernels-gpu`.
    pub const IMAGE: Image = Image {
        ptx: include_str!(concat!(env!("OUT_DIR"), "/megamoe.ptx")),
        cubin: include_bytes!(concat!(env!("OUT_DIR"), "/megamoe.cubin")),
        ptxas_report: include_str!(concat!(env!("OUT_DIR"), "/ptxas.txt")),
    };
}

/// Open GPU `ordinal` with megamoe's kernels (cached per device).
pub fn gpu(ordinal: usize) -> Result<Arc<Gpu>> {
    Gpu::open(ordinal, kernels::IMAGE)
}

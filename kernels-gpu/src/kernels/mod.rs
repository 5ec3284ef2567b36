//! One kernel (or one family of self-test kernels) per file. Every exported name is listed in
//! [`crate::manifest::KERNELS`].
pub mod combine;
pub mod ep_combine;
pub mod ep_common;
pub mod ep_dispatch;
pub mod gather;
pub mod grouped_gemm;
pub mod grouped_wgrad;
pub mod route;
pub mod selftest_sync;
pub mod selftest_tma;
pub mod selftest_wgmma;

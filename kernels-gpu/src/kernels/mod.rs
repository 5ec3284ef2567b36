//! One kernel (or one family of self-test kernels) per file. Every exported name is listed in
//! [`crate::manifest::KERNELS`].
pub mod selftest_sync;
pub mod selftest_tma;
pub mod selftest_wgmma;

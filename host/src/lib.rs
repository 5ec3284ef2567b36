//! megamoe's host side.
//!
//! - [`runtime`]: GPU detection (a typed error, never a panic, without a GPU or a driver), the per-device
//!   module cache, the launch helper (dynamic shared memory above 48 KB, checked launches), the debug switch.
//! - [`tensor_map`]: `cuTensorMapEncodeTiled`, with the map placed in device memory.
//! - [`reference`](mod@reference): the f64 CPU reference of the whole MoE layer (forward and backward) for R ranks.
//! - [`matmul64`]: the packed f64 matrix product the references use.
//! - [`rng`], [`check`]: fresh random inputs and the relative-error checks every test uses.
pub mod check;
pub mod ep;
pub mod error;
pub mod fp8;
pub mod gemm;
pub mod layer;
pub mod matmul64;
pub mod reference;
pub mod rng;
pub mod route;
pub mod runtime;
pub mod selftest;
pub mod tensor_map;
pub mod tiles;

pub use error::{Error, Result};

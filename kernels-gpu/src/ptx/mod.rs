//! The Hopper instructions megamoe uses, one `#[inline(always)] unsafe fn` per variant.
//!
//! This is the only module with `asm!`. Every wrapper carries a `// SAFETY:` line: which threads must run it
//! and what memory it touches. Shared-memory addresses are 32-bit `shared::cta` addresses (from
//! [`smem::base`]); global addresses are generic 64-bit pointers.
pub mod cluster;
pub mod cp_async;
pub mod fence;
pub mod global;
pub mod math;
pub mod mbarrier;
pub mod regs;
pub mod smem;
pub mod sync;
pub mod tma;
pub mod warp;
pub mod wgmma;

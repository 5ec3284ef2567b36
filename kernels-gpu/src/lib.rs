//! megamoe device code.
//!
//! Built twice: for `nvptx64-nvidia-cuda` (sm_90a) as the kernels the host loads, and for the host, where its
//! pure logic (descriptor bit fields, swizzle and layout math, routing math, the kernel manifest, the
//! `#[repr(C)]` parameter blocks shared with the host) is unit-tested on the CPU.
//!
//! Layers, bottom up: [`ptx`] (the only module with `asm!`; device only), [`desc`] and [`swizzle`] (pure),
//! [`manifest`] (what each kernel promises), then one kernel per file in `kernels/` (device only).
#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx, stdarch_nvptx, asm_experimental_arch))]
#![allow(clippy::missing_safety_doc)]

#[cfg(test)]
extern crate std;

pub mod desc;
pub mod manifest;
pub mod params;
pub mod swizzle;

#[cfg(target_arch = "nvptx64")]
pub mod ptx;

#[cfg(target_arch = "nvptx64")]
pub mod kernels;

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: ends the kernel.
    unsafe { core::arch::nvptx::trap() }
}

//! The bulk copy engine: `cp.async.bulk` (contiguous bytes) and `cp.async.bulk.tensor` (tiles through a tensor
//! map), loads completing on an mbarrier, stores completing in bulk groups; `prefetch.tensormap`.
//!
//! Tensor maps are 128-byte `CUtensorMap`s encoded on the host and placed in global memory (a by-value kernel
//! parameter would be copied to local memory, which the copy engine cannot read). Coordinates are in elements,
//! innermost dimension first.
use core::arch::asm;

/// `prefetch.tensormap [map]`. SAFETY: any thread; `map` points at a valid tensor map in global memory.
#[inline(always)]
pub unsafe fn prefetch_tensormap(map: *const u8) {
    asm!("prefetch.tensormap [{m}];", m = in(reg64) map, options(nostack));
}

/// `tensormap.replace.tile.global_address.global.b1024.b64 [map], addr`: point the tensor map `map` (128 bytes
/// in global memory, written by this thread before; a generic address, converted) at `addr`.
/// SAFETY: one thread; `map` 128-byte aligned global memory holding a valid tensor map that no copy reads until
/// [`tensormap_release`] here and [`tensormap_acquire`] there; `addr` meets the map's alignment (16 bytes).
#[inline(always)]
pub unsafe fn tensormap_set_address(map: *mut u8, addr: u64) {
    asm!("{{ .reg .b64 g; cvta.to.global.u64 g, {m}; tensormap.replace.tile.global_address.global.b1024.b64 [g], {a}; }}",
         m = in(reg64) map, a = in(reg64) addr, options(nostack));
}

/// `tensormap.replace.tile.global_dim.global.b1024.b32 [map], 1, rows`: set the extent of dimension 1 (the rows of
/// a 2D map, innermost dimension 0) to `rows`: boxes reaching past it read zeros there.
/// SAFETY: as [`tensormap_set_address`]; `rows` >= 1.
#[inline(always)]
pub unsafe fn tensormap_set_rows(map: *mut u8, rows: u32) {
    asm!("{{ .reg .b64 g; cvta.to.global.u64 g, {m}; tensormap.replace.tile.global_dim.global.b1024.b32 [g], 1, {r}; }}",
         m = in(reg64) map, r = in(reg32) rows, options(nostack));
}

/// `fence.proxy.tensormap::generic.release.gpu`: this thread's writes of tensor maps (generic stores and
/// `tensormap.replace`) ordered before what it does next, for copies that acquire them ([`tensormap_acquire`]).
/// SAFETY: any thread.
#[inline(always)]
pub unsafe fn tensormap_release() {
    asm!("fence.proxy.tensormap::generic.release.gpu;", options(nostack));
}

/// `fence.proxy.tensormap::generic.acquire.gpu [map], 128`: the copy engine reads the tensor map at `map` as the
/// generic proxy last wrote it (not a cached copy of an earlier content), for this thread's later copies.
/// SAFETY: any thread; `map` a 128-byte tensor map in global memory, written and released before (an earlier
/// kernel, or [`tensormap_release`] with a synchronisation this thread has acquired).
#[inline(always)]
pub unsafe fn tensormap_acquire(map: *const u8) {
    asm!("fence.proxy.tensormap::generic.acquire.gpu [{m}], 128;", m = in(reg64) map, options(nostack));
}

/// `fence.proxy.tensormap::generic.acquire.sys [map], 128`: as [`tensormap_acquire`] for a tensor map the host
/// wrote (copied into global memory before the launch): the CUDA Programming Guide asks this fence of a thread
/// before its first use of a tensor map held in global memory that way, so the copy engine cannot use a cached
/// descriptor of what the address held before (the host's map caches free and reuse map addresses).
/// SAFETY: any thread; `map` a 128-byte tensor map in global memory.
#[inline(always)]
pub unsafe fn tensormap_acquire_sys(map: *const u8) {
    asm!("fence.proxy.tensormap::generic.acquire.sys [{m}], 128;", m = in(reg64) map, options(nostack));
}

/// `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`: copy `bytes` contiguous bytes from
/// global `src` to shared `dst`, completing `bytes` of transaction on `bar`.
/// SAFETY: one thread; `dst` and `src` 16-byte aligned, `bytes` a multiple of 16; the caller has announced the
/// bytes on `bar` (arrive.expect_tx) and nobody touches `dst` until the phase completes.
#[inline(always)]
pub unsafe fn load_1d(dst: u32, src: *const u8, bytes: u32, bar: u32) {
    asm!("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{s}], {n}, [{b}];",
         d = in(reg32) dst, s = in(reg64) src, n = in(reg32) bytes, b = in(reg32) bar, options(nostack));
}

/// `cp.async.bulk.global.shared::cta.bulk_group`: copy `bytes` from shared `src` to global `dst`.
/// SAFETY: one thread; 16-byte alignment and size as [`load_1d`]; shared writes to `src` by other threads are
/// published first (`fence.proxy.async.shared::cta` in each writer, then a barrier); `src` stays untouched until
/// [`wait_group_read`].
#[inline(always)]
pub unsafe fn store_1d(dst: *mut u8, src: u32, bytes: u32) {
    asm!("cp.async.bulk.global.shared::cta.bulk_group [{d}], [{s}], {n};",
         d = in(reg64) dst, s = in(reg32) src, n = in(reg32) bytes, options(nostack));
}

/// `cp.async.bulk.tensor.2d` load of one box at (c0, c1) into shared `dst`, completing on `bar`.
/// SAFETY: one thread; `map` a valid 2D tensor map in global memory; `dst` aligned as the map's swizzle needs
/// (1024 bytes for 128-byte swizzle, else 128); the box's bytes announced on `bar`.
#[inline(always)]
pub unsafe fn load_2d(dst: u32, map: *const u8, c0: i32, c1: i32, bar: u32) {
    asm!("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{m}, {{{x}, {y}}}], [{b}];",
         d = in(reg32) dst, m = in(reg64) map, x = in(reg32) c0, y = in(reg32) c1, b = in(reg32) bar,
         options(nostack));
}

/// `cp.async.bulk.prefetch.tensor.2d.L2.global`: the box at (c0, c1) into L2 (a hint: nothing waits for it; parts
/// of the box outside the tensor are skipped). SAFETY: one thread; `map` a valid 2D tensor map in global memory.
#[inline(always)]
pub unsafe fn prefetch_2d_l2(map: *const u8, c0: i32, c1: i32) {
    asm!("cp.async.bulk.prefetch.tensor.2d.L2.global [{m}, {{{x}, {y}}}];", m = in(reg64) map, x = in(reg32) c0,
         y = in(reg32) c1, options(nostack));
}

/// `cp.async.bulk.tensor.2d ... .multicast::cluster`: as [`load_2d`], the box lands at the same shared offset
/// `dst` in every CTA of the cluster whose rank bit is set in `mask`, and completes its bytes on the mbarrier at
/// offset `bar` of each. SAFETY: as [`load_2d`], for every CTA in `mask` (each expects the bytes on its barrier
/// and its stage is free: the ring's cluster-wide empty barrier).
#[inline(always)]
pub unsafe fn load_2d_mc(dst: u32, map: *const u8, c0: i32, c1: i32, bar: u32, mask: u16) {
    asm!("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [{d}], [{m}, {{{x}, {y}}}], [{b}], {k};",
         d = in(reg32) dst, m = in(reg64) map, x = in(reg32) c0, y = in(reg32) c1, b = in(reg32) bar,
         k = in(reg16) mask, options(nostack));
}

/// `cp.async.bulk.tensor.3d` load of one box at (c0, c1, c2). SAFETY: as [`load_2d`], with a 3D map.
#[inline(always)]
pub unsafe fn load_3d(dst: u32, map: *const u8, c0: i32, c1: i32, c2: i32, bar: u32) {
    asm!("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{m}, {{{x}, {y}, {z}}}], [{b}];",
         d = in(reg32) dst, m = in(reg64) map, x = in(reg32) c0, y = in(reg32) c1, z = in(reg32) c2,
         b = in(reg32) bar, options(nostack));
}

/// `cp.async.bulk.tensor.2d` store of the box at (c0, c1) from shared `src` (out-of-range parts are clipped).
/// SAFETY: one thread; `map` a valid 2D tensor map; `src` aligned and published as for [`store_1d`].
#[inline(always)]
pub unsafe fn store_2d(map: *const u8, c0: i32, c1: i32, src: u32) {
    asm!("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [{m}, {{{x}, {y}}}], [{s}];",
         m = in(reg64) map, x = in(reg32) c0, y = in(reg32) c1, s = in(reg32) src, options(nostack));
}

/// `cp.reduce.async.bulk.tensor.2d ... .add`: add the box in shared `src` into the tensor at (c0, c1)
/// (element type from the map; out-of-range parts are clipped). Each element is read, added to and written
/// once. SAFETY: as [`store_2d`].
#[inline(always)]
pub unsafe fn reduce_add_2d(map: *const u8, c0: i32, c1: i32, src: u32) {
    asm!("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [{m}, {{{x}, {y}}}], [{s}];",
         m = in(reg64) map, x = in(reg32) c0, y = in(reg32) c1, s = in(reg32) src, options(nostack));
}

/// `cp.async.bulk.tensor.3d` store. SAFETY: as [`store_2d`], with a 3D map.
#[inline(always)]
pub unsafe fn store_3d(map: *const u8, c0: i32, c1: i32, c2: i32, src: u32) {
    asm!("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [{m}, {{{x}, {y}, {z}}}], [{s}];",
         m = in(reg64) map, x = in(reg32) c0, y = in(reg32) c1, z = in(reg32) c2, s = in(reg32) src,
         options(nostack));
}

/// `cp.async.bulk.commit_group`: close the bulk group of this thread's stores so far.
/// SAFETY: the thread that issued the stores.
#[inline(always)]
pub unsafe fn commit_group() {
    asm!("cp.async.bulk.commit_group;", options(nostack));
}

/// `cp.async.bulk.wait_group N`: wait until at most N of this thread's bulk groups are pending (writes done).
/// SAFETY: the thread that issued the groups.
#[inline(always)]
pub unsafe fn wait_group<const N: u32>() {
    asm!("cp.async.bulk.wait_group {n};", n = const N, options(nostack));
}

/// `cp.async.bulk.wait_group.read N`: as [`wait_group`], but only until the sources have been read (the shared
/// buffer may be reused). SAFETY: the thread that issued the groups.
#[inline(always)]
pub unsafe fn wait_group_read<const N: u32>() {
    asm!("cp.async.bulk.wait_group.read {n};", n = const N, options(nostack));
}

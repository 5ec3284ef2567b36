//! wgmma self-tests: one warpgroup computes D[64, N] = A[64, K] . B[N, K]^T in f32 from bf16.
//!
//! `selftest_wgmma_n{64,128,256}`: A and B tiles arrive by TMA with 128-byte swizzle (box 64 K-elements wide),
//! K advances 16 elements (32 bytes) per wgmma inside the swizzle atom.
//! `selftest_wgmma_n64_interleave`: the threads place A and B with ordinary stores in the no-swizzle
//! core-matrix layout, publish them with `fence.proxy.async.shared::cta`, and use interleave descriptors.
use crate::desc::{Layout, SmemDesc};
use crate::params::WgmmaTest;
use crate::ptx::{fence, mbarrier, regs, smem, sync, tma, wgmma};

/// K elements per shared-memory tile (one 128-byte swizzle row of bf16).
const BK: u32 = 64;
/// Rows of A per tile (one wgmma M).
const BM: u32 = 64;

/// Store the m64nN accumulator fragment of this thread into row-major f32 D[64, N].
#[inline(always)]
unsafe fn store_fragment<const A: usize>(acc: &[f32; A], d: *mut f32, n: u32) {
    let t = regs::tid();
    let row = 16 * (t / 32) + (t % 32) / 4;
    let col0 = 2 * (t % 4);
    let mut j = 0;
    while j < A / 4 {
        let c = col0 + 8 * j as u32;
        let p0 = d.add((row * n + c) as usize);
        let p1 = d.add(((row + 8) * n + c) as usize);
        *p0 = acc[4 * j];
        *p0.add(1) = acc[4 * j + 1];
        *p1 = acc[4 * j + 2];
        *p1.add(1) = acc[4 * j + 3];
        j += 1;
    }
}

macro_rules! wgmma_tma_selftest {
    ($kname:ident, $n:literal, $acc:literal, $mma:ident, $fence_op:ident) => {
        /// See the module docs. One block of 128 threads; dynamic shared memory: (64 + N) * 128 + 8 bytes.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $kname(p: WgmmaTest) {
            // shared-memory carve-out: A tile (BM x BK bf16), B tile (N x BK bf16), one mbarrier
            let a_s = smem::base();
            let b_s = a_s + BM * BK * 2;
            let bar = b_s + $n * BK * 2;
            let t = regs::tid();
            // barrier init
            if t == 0 {
                mbarrier::init(bar, 1);
                fence::mbarrier_init();
                tma::prefetch_tensormap(p.map_a as *const u8);
                tma::prefetch_tensormap(p.map_b as *const u8);
            }
            sync::block_sync();
            let mut acc = [0f32; $acc];
            let kt_n = p.k / BK;
            let mut kt = 0;
            while kt < kt_n {
                // producer: thread 0 loads the k-th A and B tiles
                if t == 0 {
                    mbarrier::arrive_expect_tx(bar, (BM + $n) * BK * 2);
                    tma::load_2d(a_s, p.map_a as *const u8, (kt * BK) as i32, 0, bar);
                    tma::load_2d(b_s, p.map_b as *const u8, (kt * BK) as i32, 0, bar);
                }
                mbarrier::wait_parity(bar, kt & 1);
                // consumer: 4 k16 steps through the swizzle atom
                wgmma::fence();
                let da = SmemDesc::k_major_sw128(a_s);
                let db = SmemDesc::k_major_sw128(b_s);
                let mut ks = 0;
                while ks < BK / 16 {
                    let scale_d = (kt > 0 || ks > 0) as u32;
                    wgmma::$mma(&mut acc, da.advance(32 * ks).0, db.advance(32 * ks).0, scale_d);
                    ks += 1;
                }
                wgmma::commit_group();
                wgmma::wait_group::<0>();
                wgmma::$fence_op(&mut acc);
                // every warp is done with the tiles before thread 0 overwrites them
                sync::block_sync();
                kt += 1;
            }
            // epilogue
            store_fragment(&acc, p.d as *mut f32, $n);
        }
    };
}

wgmma_tma_selftest!(selftest_wgmma_n64, 64, 32, m64n64k16_f32_bf16_ss, fence_operand_32);
wgmma_tma_selftest!(selftest_wgmma_n128, 128, 64, m64n128k16_f32_bf16_ss, fence_operand_64);
wgmma_tma_selftest!(selftest_wgmma_n256, 256, 128, m64n256k16_f32_bf16_ss, fence_operand_128);

/// Byte offset of element (r, k) of a K-major tile with BK = 64 in the interleaved core-matrix layout:
/// core matrices of 8 rows x 16 bytes, LBO = 128 bytes along K, SBO = 1024 bytes along M/N.
#[inline(always)]
const fn interleave_offset(r: u32, k: u32) -> u32 {
    (r / 8) * 1024 + (k / 8) * 128 + (r % 8) * 16 + (k % 8) * 2
}

/// See the module docs. N = 64; one block of 128 threads; dynamic shared memory 16 KiB.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn selftest_wgmma_n64_interleave(p: WgmmaTest) {
    const N: u32 = 64;
    let a_s = smem::base();
    let b_s = a_s + BM * BK * 2;
    let t = regs::tid();
    let a = p.a as *const [u32; 4];
    let b = p.b as *const [u32; 4];
    let mut acc = [0f32; 32];
    let kt_n = p.k / BK;
    let mut kt = 0;
    while kt < kt_n {
        // every thread places 16-byte rows of core matrices: (BM + N) rows x 8 chunks
        let mut i = t;
        while i < (BM + N) * (BK / 8) {
            let r = i / 8;
            let c = i % 8;
            if r < BM {
                let v = *a.add(((r * p.k + kt * BK) / 8 + c) as usize);
                smem::st_v4(a_s + interleave_offset(r, c * 8), v);
            } else {
                let rb = r - BM;
                let v = *b.add(((rb * p.k + kt * BK) / 8 + c) as usize);
                smem::st_v4(b_s + interleave_offset(rb, c * 8), v);
            }
            i += 128;
        }
        fence::proxy_async_shared_cta();
        sync::block_sync();
        wgmma::fence();
        let mut ks = 0;
        while ks < BK / 16 {
            let da = SmemDesc::new(a_s + ks * 256, 128, 1024, Layout::Interleave);
            let db = SmemDesc::new(b_s + ks * 256, 128, 1024, Layout::Interleave);
            wgmma::m64n64k16_f32_bf16_ss(&mut acc, da.0, db.0, (kt > 0 || ks > 0) as u32);
            ks += 1;
        }
        wgmma::commit_group();
        wgmma::wait_group::<0>();
        wgmma::fence_operand_32(&mut acc);
        sync::block_sync();
        kt += 1;
    }
    store_fragment(&acc, p.d as *mut f32, N);
}

/// MN-major operands: see [`crate::params::WgmmaMnTest`]. One block of 128 threads; shared memory
/// 8 KiB (A) + 16 KiB (B, two 64-wide boxes) + 16.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn selftest_wgmma_mn(p: crate::params::WgmmaMnTest) {
    let a_s = smem::base();
    let b_s = a_s + 8192;
    let bar = b_s + 16384;
    let t = regs::tid();
    if t == 0 {
        mbarrier::init(bar, 1);
        fence::mbarrier_init();
    }
    sync::block_sync();
    if t == 0 {
        mbarrier::arrive_expect_tx(bar, 8192 + 16384);
        // A: K-major box (64 K, 64 M) or M-major box (64 M, 64 K); B: two boxes (64 N, 64 K)
        tma::load_2d(a_s, p.map_a as *const u8, 0, 0, bar);
        tma::load_2d(b_s, p.map_b as *const u8, 0, 0, bar);
        tma::load_2d(b_s + 8192, p.map_b as *const u8, 64, 0, bar);
    }
    mbarrier::wait_parity(bar, 0);
    let mut acc = [0f32; 64];
    wgmma::fence();
    let mut ks = 0;
    while ks < 4 {
        // MN-major: a k16 step is 16 rows of 128 bytes further
        let db = SmemDesc::new(b_s + ks * 2048, p.lbo, p.sbo, Layout::Swizzle128B);
        if p.trans_a == 0 {
            let da = SmemDesc::k_major_sw128(a_s).advance(32 * ks);
            wgmma::m64n128k16_f32_bf16_ss_bt(&mut acc, da.0, db.0, (ks > 0) as u32);
        } else {
            let da = SmemDesc::new(a_s + ks * 2048, p.lbo, p.sbo, Layout::Swizzle128B);
            wgmma::m64n128k16_f32_bf16_ss_tt(&mut acc, da.0, db.0, (ks > 0) as u32);
        }
        ks += 1;
    }
    wgmma::commit_group();
    wgmma::wait_group::<0>();
    wgmma::fence_operand_64(&mut acc);
    store_fragment(&acc, p.d as *mut f32, 128);
}

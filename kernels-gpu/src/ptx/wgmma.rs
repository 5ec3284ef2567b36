//! `wgmma.mma_async` (warpgroup MMA) for bf16 operands with f32 accumulators, plus its fence / commit / wait.
//!
//! One wrapper per shape m64nNk16 and operand layout, A and B from shared-memory descriptors: `_ss` (both
//! K-major), `_ss_bt` (B transposed: N-major, as dgrad's weights are stored) and `_ss_tt` (both transposed: A
//! M-major, B N-major, as the weight-gradient GEMMs read activations). The
//! accumulator of an m64nN tile is `[f32; N / 2]` per thread, laid out as the PTX ISA's wgmma D fragment:
//! thread t of the warpgroup holds rows `16 * (t / 32) + (t % 32) / 4` and `+ 8`, columns
//! `8 * j + 2 * (t % 4) + {0, 1}` for j in 0..N/8, in the order `acc[4j + {0, 1}]` (first row), `acc[4j + {2, 3}]`
//! (second row). `scale_d = 0` overwrites the accumulator, `1` adds to it.
use core::arch::asm;

/// `wgmma.fence.sync.aligned`: order earlier register and shared-memory accesses before the next wgmma.
/// SAFETY: all 128 threads of the warpgroup, uniformly; before the first wgmma and whenever the accumulator
/// registers were touched by other instructions.
#[inline(always)]
pub unsafe fn fence() {
    asm!("wgmma.fence.sync.aligned;", options(nostack));
}

/// `wgmma.commit_group.sync.aligned`: close the group of wgmma issued so far.
/// SAFETY: all 128 threads of the warpgroup, uniformly.
#[inline(always)]
pub unsafe fn commit_group() {
    asm!("wgmma.commit_group.sync.aligned;", options(nostack));
}

/// `wgmma.wait_group.sync.aligned N`: wait until at most N groups are pending. Follow it with
/// `fence_operand_*` on the accumulators before reading them.
/// SAFETY: all 128 threads of the warpgroup, uniformly.
#[inline(always)]
pub unsafe fn wait_group<const N: u32>() {
    asm!("wgmma.wait_group.sync.aligned {n};", n = const N, options(nostack));
}

macro_rules! wgmma_bf16 {
    ($name:ident, $shape:literal, $n:literal, $ta:literal, $tb:literal, [$first:tt $(, $rest:tt)*]) => {
        #[doc = concat!("`wgmma.mma_async.sync.aligned.", $shape, ".f32.bf16.bf16` with A and B from shared-memory descriptors",
                        " (imm-trans-a = ", $ta, ", imm-trans-b = ", $tb, ").")]
        /// SAFETY: all 128 threads of a warpgroup, uniformly, after [`fence`]; the descriptors describe operand
        /// tiles in shared memory written before (and published to the async proxy if written by ordinary stores);
        /// the accumulator is not read until [`wait_group`] and the matching `fence_operand_*`.
        #[inline(always)]
        pub unsafe fn $name(acc: &mut [f32; $n], desc_a: u64, desc_b: u64, scale_d: u32) {
            asm!(
                concat!(
                    "{{ .reg .pred p; setp.ne.b32 p, {sd}, 0; wgmma.mma_async.sync.aligned.", $shape, ".f32.bf16.bf16 {{",
                    "{", stringify!($first), "}", $(", {", stringify!($rest), "}",)*
                    "}}, {da}, {db}, p, 1, 1, ", $ta, ", ", $tb, "; }}"
                ),
                inout(reg32) acc[$first], $(inout(reg32) acc[$rest],)*
                da = in(reg64) desc_a, db = in(reg64) desc_b, sd = in(reg32) scale_d, options(nostack)
            );
        }
    };
}

macro_rules! wgmma_e4m3 {
    ($name:ident, $shape:literal, $n:literal, [$first:tt $(, $rest:tt)*]) => {
        #[doc = concat!("`wgmma.mma_async.sync.aligned.", $shape, ".f32.e4m3.e4m3` with A and B from shared-memory descriptors,",
                        " both K-major (8-bit operands have no transposed form): 32 bytes of K per instruction.")]
        /// SAFETY: as the bf16 wrappers: all 128 threads of a warpgroup, uniformly, after [`fence`]; the accumulator
        /// is not read until [`wait_group`] and the matching `fence_operand_*`.
        #[inline(always)]
        pub unsafe fn $name(acc: &mut [f32; $n], desc_a: u64, desc_b: u64, scale_d: u32) {
            asm!(
                concat!(
                    "{{ .reg .pred p; setp.ne.b32 p, {sd}, 0; wgmma.mma_async.sync.aligned.", $shape, ".f32.e4m3.e4m3 {{",
                    "{", stringify!($first), "}", $(", {", stringify!($rest), "}",)*
                    "}}, {da}, {db}, p, 1, 1; }}"
                ),
                inout(reg32) acc[$first], $(inout(reg32) acc[$rest],)*
                da = in(reg64) desc_a, db = in(reg64) desc_b, sd = in(reg32) scale_d, options(nostack)
            );
        }
    };
}

macro_rules! fence_operand {
    ($fence:ident, $n:literal, [$($i:tt),*]) => {
        #[doc = concat!("Tie the ", stringify!($n), " accumulator registers to this point: the compiler may not move reads of")]
        /// them above it (use after [`wait_group`]). SAFETY: any thread; no memory; emits only a PTX comment.
        #[inline(always)]
        pub unsafe fn $fence(acc: &mut [f32; $n]) {
            asm!(concat!("// fence operands", $(" {", stringify!($i), "}",)*), $(inout(reg32) acc[$i],)*
                 options(nomem, nostack, preserves_flags));
        }
    };
}
/// One accumulator width: its `fence_operand_*` and the bf16 wrappers of the three operand layouts, all from one
/// index list (the accumulator registers `0..n`).
macro_rules! bf16_shape {
    ($shape:literal, $n:literal, $fence:ident, $ss:ident, $bt:ident, $tt:ident, $idx:tt) => {
        fence_operand!($fence, $n, $idx);
        wgmma_bf16!($ss, $shape, $n, "0", "0", $idx);
        wgmma_bf16!($bt, $shape, $n, "0", "1", $idx);
        wgmma_bf16!($tt, $shape, $n, "1", "1", $idx);
    };
}
bf16_shape!(
    "m64n16k16",
    8,
    fence_operand_8,
    m64n16k16_f32_bf16_ss,
    m64n16k16_f32_bf16_ss_bt,
    m64n16k16_f32_bf16_ss_tt,
    [0, 1, 2, 3, 4, 5, 6, 7]
);
bf16_shape!(
    "m64n32k16",
    16,
    fence_operand_16,
    m64n32k16_f32_bf16_ss,
    m64n32k16_f32_bf16_ss_bt,
    m64n32k16_f32_bf16_ss_tt,
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
);
bf16_shape!(
    "m64n64k16",
    32,
    fence_operand_32,
    m64n64k16_f32_bf16_ss,
    m64n64k16_f32_bf16_ss_bt,
    m64n64k16_f32_bf16_ss_tt,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
        30, 31
    ]
);
bf16_shape!(
    "m64n96k16",
    48,
    fence_operand_48,
    m64n96k16_f32_bf16_ss,
    m64n96k16_f32_bf16_ss_bt,
    m64n96k16_f32_bf16_ss_tt,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
        30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47
    ]
);
bf16_shape!(
    "m64n128k16",
    64,
    fence_operand_64,
    m64n128k16_f32_bf16_ss,
    m64n128k16_f32_bf16_ss_bt,
    m64n128k16_f32_bf16_ss_tt,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
        30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57,
        58, 59, 60, 61, 62, 63
    ]
);
bf16_shape!(
    "m64n192k16",
    96,
    fence_operand_96,
    m64n192k16_f32_bf16_ss,
    m64n192k16_f32_bf16_ss_bt,
    m64n192k16_f32_bf16_ss_tt,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
        30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57,
        58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85,
        86, 87, 88, 89, 90, 91, 92, 93, 94, 95
    ]
);
bf16_shape!(
    "m64n256k16",
    128,
    fence_operand_128,
    m64n256k16_f32_bf16_ss,
    m64n256k16_f32_bf16_ss_bt,
    m64n256k16_f32_bf16_ss_tt,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
        30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57,
        58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85,
        86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110,
        111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127
    ]
);
wgmma_e4m3!(
    m64n128k32_f32_e4m3_ss,
    "m64n128k32",
    64,
    [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
        30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57,
        58, 59, 60, 61, 62, 63
    ]
);

//! `#[repr(C)]` parameter blocks shared by the host and the kernels (one kernel argument each).

/// Arguments of the wgmma self-test: D[64, N] (f32, row-major) = A[64, K] . B[N, K]^T, both bf16 K-major.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct WgmmaTest {
    /// Tensor map of A (2D: K inner, 64 rows; box 64 x 64; 128-byte swizzle), in global memory.
    pub map_a: u64,
    /// Tensor map of B (2D: K inner, N rows; box 64 x N; 128-byte swizzle).
    pub map_b: u64,
    /// For the interleaved (no-swizzle) variant: A and B as plain row-major bf16 arrays.
    pub a: u64,
    /// See `a`.
    pub b: u64,
    /// D, f32 [64, N].
    pub d: u64,
    /// K, a multiple of 64.
    pub k: u32,
    /// Unused; keeps the block 8-byte sized.
    pub pad: u32,
}

/// Arguments of the TMA round-trip self-test: every block copies one box from `src` to `dst` through shared
/// memory, and dumps the raw shared-memory tile into `smem_dump` (block b at offset b * box_bytes).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct TmaTest {
    /// Tensor map of the source.
    pub map_src: u64,
    /// Tensor map of the destination (same shape and box).
    pub map_dst: u64,
    /// Raw shared-memory tiles, u8 [blocks, box_bytes].
    pub smem_dump: u64,
    /// Box extents in elements (inner first); `box_dims[2]` is 1 for 2D.
    pub box_dims: [u32; 3],
    /// Boxes along each dimension (the grid is their product).
    pub boxes: [u32; 3],
    /// Bytes of one box.
    pub box_bytes: u32,
    /// Unused.
    pub pad: u32,
}

/// Arguments of the flag-passing self-test: a chain of blocks, each waiting for its predecessor's flag.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct FlagTest {
    /// u32 [blocks]: flags, zero before the launch.
    pub flags: u64,
    /// u32 [blocks, words]: data block b writes after reading block b - 1's.
    pub data: u64,
    /// u32 [blocks]: 0 = ok, 1 = timed out waiting.
    pub status: u64,
    /// u32 counter for the `red.release` mode, zero before the launch.
    pub counter: u64,
    /// Words per block.
    pub words: u32,
    /// 0: st.release / ld.acquire at gpu scope; 1: at sys scope; 2: red.release.gpu into a counter;
    /// | 0x100: block 0 withholds its flag (modes 0 and 1), so block 1's bounded wait must expire.
    pub mode: u32,
    /// Wait bound in nanoseconds.
    pub timeout_ns: u64,
}

/// Timeout status code the kernels write when a bounded wait expires.
pub const STATUS_TIMEOUT: u32 = 1;

/// Arguments of the mbarrier transaction-count self-test (one block of 128 threads).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct MbarrierTest {
    /// Source bytes, [2 * bytes] (phase 0 copies the first half, phase 1 the second).
    pub src: u64,
    /// Destination, [2 * bytes]: what shared memory held after each phase.
    pub out: u64,
    /// u32 [8]: try_wait answers observed around each phase (see the kernel).
    pub status: u64,
    /// Bytes per phase, a multiple of 32, at most 64 KiB.
    pub bytes: u32,
    /// Unused.
    pub pad: u32,
}

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

/// Arguments of the row-gather-by-TMA self-test (`selftest_tma_rows`): can a tile of 128 rows picked by index be
/// loaded as 128 one-row boxes (64 bf16 = 128 bytes each, 128-byte swizzle) into the layout a 128-row box makes?
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct TmaRowsTest {
    /// Tensor map of a bf16 [rows, cols] matrix, box 64 x 1 (one row segment), 128-byte swizzle.
    pub map_row: u64,
    /// The same matrix, box 64 x 128, 128-byte swizzle.
    pub map_tile: u64,
    /// u32 \[128\]: the source row of each tile row.
    pub rows: u64,
    /// u8 [3, 16384]: the raw tile after each phase (one-row boxes by 128 threads, by one thread; one 128-row
    /// box of rows 0..128).
    pub smem_dump: u64,
    /// u64 \[3\]: cycles from the first issue to the completed wait, per phase (thread 0's `%clock64`).
    pub cycles: u64,
    /// First column (elements) of the segment loaded, a multiple of 64.
    pub col0: u32,
    /// Unused.
    pub pad: u32,
}

/// Arguments of the multicast self-test (`selftest_tma_mc`, 2-CTA clusters): pair j of the grid reads boxes
/// j * iters .. (j + 1) * iters of `map_src` (128 rows x 64 bf16 each, 128-byte swizzle) into both its CTAs, each
/// CTA loading its own copy (`mode` 0) or CTA 0 multicasting one copy into both (`mode` 1). Each thread sums the
/// u32 words it reads (wrapping) into `sums[block * 128 + thread]`; the swizzle permutes 16-byte chunks, so a
/// block's total is the plain sum of its boxes' words. Under ncu the two modes' L2 read sectors say whether a
/// multicast is read from L2 once.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct TmaMcTest {
    /// Tensor map of a bf16 [rows, 64] matrix, box 64 x 128, 128-byte swizzle.
    pub map_src: u64,
    /// u32 [grid * 128]: every thread's sum.
    pub sums: u64,
    /// Boxes per pair.
    pub iters: u32,
    /// 0: each CTA loads its copy; 1: CTA 0 multicasts into both.
    pub mode: u32,
}

/// Arguments of the flag-passing self-test: a chain of blocks, each waiting for its predecessor's flag.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct FlagTest {
    /// u32 \[blocks\]: flags, zero before the launch.
    pub flags: u64,
    /// u32 [blocks, words]: data block b writes after reading block b - 1's.
    pub data: u64,
    /// u32 \[blocks\]: 0 = ok, 1 = timed out waiting.
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

/// Arguments of the ldmatrix / stmatrix self-test (`selftest_matrix`, one warp).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct MatrixTest {
    /// u32 [32 * 4]: lane l's four registers at 4 l (what stmatrix stores).
    pub regs: u64,
    /// u8 \[512\]: four 8 x 8 b16 matrices, row-major, matrix i at byte 128 i (what ldmatrix loads).
    pub mem: u64,
    /// u32 [4 * 128]: shared memory after stmatrix.x4 (128 words), after stmatrix.x4.trans (128 words), then
    /// ldmatrix.x4's and ldmatrix.x4.trans's registers (lane l's at 4 l of each 128).
    pub out: u64,
}

/// Arguments of the mbarrier transaction-count self-test (one block of 128 threads).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct MbarrierTest {
    /// Source bytes, [2 * bytes] (phase 0 copies the first half, phase 1 the second).
    pub src: u64,
    /// Destination, [2 * bytes]: what shared memory held after each phase.
    pub out: u64,
    /// u32 \[8\]: try_wait answers observed around each phase (see the kernel).
    pub status: u64,
    /// Bytes per phase, a multiple of 32, at most 64 KiB.
    pub bytes: u32,
    /// Unused.
    pub pad: u32,
}

/// Routing layout (kernels `route_count`, `route_scan`, `route_place`; the algorithm in [`crate::route`]): rows of
/// expert e are the slots `t * k + j` with `topk_ids[t, j] = e`, in increasing slot order, at rows
/// `offsets[e]..offsets[e + 1]`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Route {
    /// i32 \[slots\]: expert ids (-1 = masked).
    pub topk_ids: u64,
    /// u32 \[E\]: rows per expert (written by `route_scan`).
    pub counts: u64,
    /// u32 [E + 1]: first row of each expert (written by `route_scan`).
    pub offsets: u64,
    /// u32 [E + 1]: first m-tile of each expert, tiles of `tile_m` rows (written by `route_scan`).
    pub tile_offsets: u64,
    /// u32 \[slots\]: the slot of each row, rows 0..offsets\[E\] (written by `route_place`).
    pub row_slot: u64,
    /// i32 \[slots\]: the row of each slot, -1 for a masked slot (written by `route_place`).
    pub slot_row: u64,
    /// u32 \[1\], the call's routing error word, zero before `route_count`: set to 1 there when an id is outside
    /// -1..E. When set, `route_scan` writes all-zero offsets and tile offsets and `route_place` writes nothing.
    /// `route_fused` writes it whole (0, 1, or [`ROUTE_TIMEOUT`]): no zeroing before it.
    pub error: u64,
    /// u32 [chunks, E], workspace (`route::max_chunks(max slots)` rows): each chunk's rows per expert
    /// (`route_count`), then each chunk's first row per expert (`route_scan`, read by `route_place`).
    /// `route_fused`: each chunk's rows per expert, then each chunk's rows of each expert in earlier chunks.
    pub chunk_counts: u64,
    /// `route_fused` only: u32 \[1\], its grid barrier's word ([`crate::grid`]; zero before the first call, left
    /// ready by each call).
    pub barrier: u64,
    /// `route_fused` only: bound of each grid-barrier wait, in nanoseconds of `%globaltimer` (on expiry the error
    /// word is set to [`ROUTE_TIMEOUT`] and nothing past the counts is written).
    pub timeout_ns: u64,
    /// Slots = tokens * k.
    pub slots: u32,
    /// Experts.
    pub experts: u32,
    /// Rows per m-tile of the grouped GEMMs.
    pub tile_m: u32,
    /// Slots per chunk: `route::chunk_slots(slots)` (set by the host's `route::launch`; the workspace is sized
    /// for it).
    pub chunk: u32,
}

/// The routing error word's value when `route_fused`'s grid barrier expired (its blocks were not all resident
/// within the bound): the offsets and tile offsets are zero (no gather or GEMM after it has rows) and the rows are
/// not written, and the kernels that write the layer's outputs return at once, as for an invalid id.
pub const ROUTE_TIMEOUT: u32 = 0x7f00_0002;

/// Row gather (kernel `gather_rows`): dst\[r\] = src[row_slot\[r\] / k] for r < offsets\[E\], rows of `cols` bf16.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Gather {
    /// bf16 [tokens, cols].
    pub src: u64,
    /// bf16 [rows, cols].
    pub dst: u64,
    /// u32 \[rows\].
    pub row_slot: u64,
    /// u32 [E + 1]; offsets\[E\] is the row count.
    pub offsets: u64,
    /// Columns (a multiple of 8).
    pub cols: u32,
    /// Slots per token.
    pub k: u32,
    /// Experts.
    pub experts: u32,
    /// Unused.
    pub pad: u32,
}

/// Dequantizing row gather (kernel `gather_rows_dequant`): dst\[r\] = bf16(codes\[t\] * scales\[t\]) with t =
/// row_slot\[r\] / k (t = r when `row_slot` is 0), for r < min(offsets\[E\], rows_max) (r < rows_max when
/// `offsets` is 0): e4m3 codes in 1 x 128 blocks (one f32 scale a block) back to bf16 rows (each value decoded
/// exactly, times its scale in f32, rounded once to nearest-even bf16).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct GatherDequant {
    /// u8 [tokens, cols]: e4m3 codes.
    pub src: u64,
    /// f32 [tokens, cols / 128].
    pub scales: u64,
    /// bf16 [rows, cols].
    pub dst: u64,
    /// u32 \[rows\], or 0 (row r is token r).
    pub row_slot: u64,
    /// u32 [E + 1] (offsets\[E\] is the row count), or 0 (`rows_max` rows).
    pub offsets: u64,
    /// Columns (a multiple of 128).
    pub cols: u32,
    /// Slots per token.
    pub k: u32,
    /// Experts.
    pub experts: u32,
    /// The rows `dst` holds: the row count is clamped to it.
    pub rows_max: u32,
}

/// Combine (kernel `combine_rows`): out\[t\] = sum over j of w[t, j] * y[slot_row[t * k + j]] in f32, j in order,
/// masked slots skipped; out in bf16. With `w` = 0 every weight is 1 (the backward's dx).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct Combine {
    /// bf16 [rows, cols].
    pub y: u64,
    /// f32 [tokens, k].
    pub w: u64,
    /// i32 [tokens * k].
    pub slot_row: u64,
    /// bf16 [tokens, cols].
    pub out: u64,
    /// u32 \[1\]: the routing error word of the forward (`Route::error`); when set the kernel writes nothing.
    /// 0: no word.
    pub error: u64,
    /// Tokens.
    pub tokens: u32,
    /// Columns (a multiple of 8).
    pub cols: u32,
    /// Slots per token.
    pub k: u32,
    /// Unused.
    pub pad: u32,
}

impl Combine {
    /// No combine: no tokens, no buffers (the role of a kernel launched without one).
    pub const NONE: Combine = Combine { y: 0, w: 0, slot_row: 0, out: 0, error: 0, tokens: 0, cols: 0, k: 0, pad: 0 };
}

/// Grouped GEMM over experts (M-grouped): for each expert e and its rows offsets\[e\]..offsets[e + 1] of A,
/// C[rows, N] = A[rows, K] . B_e[N, K]^T, with the epilogue of the kernel.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct GroupedGemm {
    /// Tensor map of A: bf16 [rows_total, K], box 64 x 128 rows, 128-byte swizzle.
    pub map_a: u64,
    /// Tensor map of B: bf16 [E * n_b, K] (n_b rows per expert), box 64 x 128 rows, 128-byte swizzle (a stage's B
    /// is two boxes);
    /// for the N-major variant bf16 [E * K, N], box 64 x 64.
    pub map_b: u64,
    /// u32 [E + 1] row offsets.
    pub offsets: u64,
    /// u32 [E + 1] m-tile offsets (tiles of 128 rows).
    pub tile_offsets: u64,
    /// Output, bf16, row stride `ldc` elements.
    pub c: u64,
    /// Optional second output (SwiGLU: z = [g | u] bf16 [rows, 2 * n]); 0 for none.
    pub z: u64,
    /// Experts.
    pub experts: u32,
    /// Output columns per expert (plain: N; SwiGLU: I).
    pub n: u32,
    /// Contraction length, a multiple of 64.
    pub k: u32,
    /// Rows of B per expert in `map_b` (plain: N; SwiGLU: 2I).
    pub n_b: u32,
    /// Row stride of C in elements.
    pub ldc: u32,
    /// Output tiles along N.
    pub n_tiles: u32,
    /// SwiGLU-backward epilogue: f32 \[slots\] routing weights (s of each row's slot). Row-scattered epilogue:
    /// f32 \[c_rows\] the factor of each destination row, 0 for none.
    pub w: u64,
    /// SwiGLU-backward epilogue: u32 \[rows\] slot of each row. Row-scattered epilogue: u32 \[rows\] the row of C
    /// each row goes to.
    pub row_slot: u64,
    /// SwiGLU-backward epilogue: f32 [rows, n_tiles] partial sums of dh * h (dtopk).
    pub partial: u64,
    /// Plain bf16 epilogue: tensor map of C as bf16 [rows, n] (ldc = n), box 64 x 64, 128-byte swizzle; whole
    /// 64-row groups of one expert are stored through it. SwiGLU-backward epilogue: the same over dz = C as bf16
    /// [rows, 2 * n] (set together with `map_z`). 0: every row stored from registers.
    pub map_c: u64,
    /// SwiGLU-backward epilogue: bf16 [rows, n] output s * h (the dW2 operand, s the row's routing weight);
    /// 0 for none.
    pub sh: u64,
    /// Tensor map of z = [g | u] as bf16 [rows, 2 * n], box 64 x 64, 128-byte swizzle: the SwiGLU epilogue
    /// stores z through it, the SwiGLU-backward epilogue loads g and u through it. 0: no map (register path).
    pub map_z: u64,
    /// SwiGLU-backward epilogue: tensor map of `sh` as bf16 [rows, n], box 64 x 64, 128-byte swizzle (whole 64-row
    /// groups store s * h through it); 0: s * h from registers.
    pub map_sh: u64,
    /// Gathered A (`grouped_gemm_swiglu_gather`): bf16 [T, K], the tokens; row r of the expert-ordered batch is
    /// token row_slot\[r\] / top_k (`row_slot` above), copied row by row, so the gathered copy of A need not
    /// exist. 0 otherwise (A through `map_a`).
    pub a_rows: u64,
    /// Slots per token (the gathered A).
    pub top_k: u32,
    /// Row-scattered epilogue (`grouped_gemm_bf16_scatter`): rows of C; a row whose destination
    /// (`row_slot[row]`) is at or past it is not written. 0 for the other kernels.
    pub c_rows: u32,
    /// Rows the expert-ordered buffers hold (A, C, z, dz, s h, `partial`, `row_slot`, `a_copy`): no row at or
    /// past it is read or written whatever the device offsets say (each tile's rows are clamped to it), and the
    /// kernels walk at most `scheduler::m_tiles_bound(rows_max, experts)` m-tiles whatever `tile_offsets[E]`
    /// says. Offsets as promised (nondecreasing, `offsets[E] <= rows_max`) are never clamped.
    pub rows_max: u32,
    /// SwiGLU-backward epilogue: entries of `w` (slots); a row whose slot `row_slot[row]` is at or past it takes
    /// the weight 0 (nothing is read for it). 0 for the other kernels.
    pub w_len: u32,
    /// The gather overlapped with the GEMM (kernels built on `grouped_gemm::produce` and `ffn_fused_fwd`):
    /// bf16 [rows, K], the expert-ordered rows that `map_a` covers. When non-zero, the producer warpgroup's three
    /// idle warps copy row r from token row_slot\[r\] / top_k of `a_rows` into it while the GEMM runs, and the
    /// TMA thread loads an m-tile's A only once its rows are counted on `arrive`. 0: A is already there.
    pub a_copy: u64,
    /// With `a_copy`: u32 [m-tiles] rows copied per m-tile (zero at launch).
    pub arrive: u64,
    /// With `a_copy`: u32 error word, set to [`FUSED_TIMEOUT`] when a wait for an m-tile's rows expired (the launch
    /// then finishes without further waits; its output is not to be used).
    pub error: u64,
    /// With `a_copy`: bound of each wait, in nanoseconds of `%globaltimer`.
    pub timeout_ns: u64,
    /// With `a_copy`, expert-parallel pull (docs/FUSED.md step 2): 0, or the address of u64 \[world\] row bases
    /// (each source rank's x, published by `ep_dispatch` in the owner's workspace); then `row_slot` holds the
    /// (source rank, source slot) pair of each row (the workspace's `recv_meta`) and row r is copied from token
    /// slot / top_k of that rank's x.
    pub a_src_ranks: u64,
    /// `grouped_gemm_bf16_scatter`, expert-parallel: 0, or the address of u64 \[world\] destination bases (each
    /// source rank's `back` region, from the owner's workspace `back_ptrs`); then `row_slot` holds the (source
    /// rank, source slot) pair of each row (`recv_meta`) and row r goes to row slot of that rank's base
    /// (`c_rows` bounds the slot).
    pub c_dst_ranks: u64,
    /// The `_dyn` kernels (`grouped_gemm_bf16_dyn`, `grouped_gemm_bt_bf16_dyn`): u32 \[1\], zeroed by the host
    /// before the launch, the run-time tile counter (block b takes tile b first, then the counter's next index +
    /// grid, so the tiles in flight stay the next `grid` of the order whatever each block's pace). 0 elsewhere.
    pub sched: u64,
    /// The side copy (`grouped_gemm_bt_bf16_cpx`): bf16 columns of the rows the movers copy from `a_rows` into
    /// `a_copy` (a buffer the kernel itself does not read: the backward's dx copying x's rows for dW1), counted on
    /// `arrive` but waited for by nobody. 0 elsewhere (the movers copy rows of K columns, the kernel's own A).
    pub copy_cols: u32,
    /// Bit 0 ([`GEMM_GATHER_AHEAD`]): the epilogue-warps gathering producers take the next tile and read its row
    /// tokens while the current tile's k-steps run (one tile hand-off barrier off the critical path); 0 otherwise.
    pub flags: u32,
    /// The dh GEMM gathering dy in its producer (`grouped_gemm_bt_dswiglu_ew7_gather`): bf16 [rows, K], where the
    /// tiles of n-tile 0 write the gathered rows in expert order (the copy dW2 reads); 0: none written.
    pub a_out: u64,
}

/// [`GroupedGemm::flags`] bit: the gathering producers' look-ahead tile hand-off.
pub const GEMM_GATHER_AHEAD: u32 = 1;

/// The fused forward's GEMMs in one persistent launch (kernel `ffn_fused_fwd`, docs/FUSED.md step 1): GEMM1 +
/// SwiGLU (`g1`, as `grouped_gemm_swiglu`) and GEMM2 (`g2`, as `grouped_gemm_bf16`, A = g1's h) over the same
/// routing (`offsets`, `tile_offsets`, `experts` equal in both), their tiles walked in one dependency order
/// ([`crate::scheduler::fused_item`]); a GEMM2 tile starts once every GEMM1 tile of its m-tile has stored h.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct FusedFfn {
    /// GEMM1 + SwiGLU.
    pub g1: GroupedGemm,
    /// GEMM2.
    pub g2: GroupedGemm,
    /// u32 [m-tiles] per-m-tile counts of GEMM1 tile halves stored (zero at launch; 2 per GEMM1 tile: one per
    /// consumer warpgroup).
    pub ready: u64,
    /// u32 error word (the routing's): a non-zero word at entry makes the kernel return at once; set to
    /// [`FUSED_TIMEOUT`] when a wait for an m-tile's h (or, with `g1.a_copy`, its rows of x) expired (the launch
    /// then finishes without further waits; its output is not to be used).
    pub error: u64,
    /// Bound of each wait, in nanoseconds of `%globaltimer`.
    pub timeout_ns: u64,
    /// Steps GEMM1 runs ahead of GEMM2 in the walk (>= 1).
    pub lag: u32,
    /// Unused.
    pub pad: u32,
}

/// The error word's value after an expired wait of `ffn_fused_fwd` or of a GEMM's overlapped gather.
pub const FUSED_TIMEOUT: u32 = 0x7f00_0001;

/// K-grouped weight-gradient GEMM (kernel `grouped_wgrad_f32`): for each expert e,
/// C_e[M, N] (+)= A[rows_e, M]^T . B[rows_e, N], contracting over the expert's rows offsets\[e\]..offsets[e + 1]
/// (both operands MN-major, loaded in 64 x 64 boxes through per-expert tensor maps that end at the expert's last
/// row, so the copy engine fills the rows past it with zeros and the next expert's rows are never read).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct WgradGemm {
    /// Tensor map of A: bf16 [rows_total, M], box 64 x 64, 128-byte swizzle.
    pub map_a: u64,
    /// Tensor map of B: bf16 [rows_total, N], box 64 x 64, 128-byte swizzle.
    pub map_b: u64,
    /// u32 [E + 1] row offsets.
    pub offsets: u64,
    /// f32 [E, M, N].
    pub c: u64,
    /// Tensor map of C as f32 [E * M, N], box 64 rows x 32 columns, 128-byte swizzle (the epilogue stores, or
    /// adds, through it).
    pub map_c: u64,
    /// u32 \[1\]: the routing error word of the forward (`Route::error`); when set the kernel returns at entry and
    /// C is neither overwritten nor added to. 0: no word.
    pub error: u64,
    /// Experts.
    pub experts: u32,
    /// M (a multiple of 64).
    pub m: u32,
    /// N (a multiple of 8).
    pub n: u32,
    /// Tiles of 128 along M.
    pub m_tiles: u32,
    /// Tiles of 256 along N.
    pub n_tiles: u32,
    /// 1: add into C; 0: overwrite.
    pub accumulate: u32,
    /// u32 \[1\], zeroed by the host before the launch: the tile scheduler's counter (a block that finishes early
    /// takes the next tile); 0: every block takes every grid-th tile. Launches sharing it must not overlap.
    pub sched: u64,
    /// `grouped_wgrad_f32_mv`: a combine (as `combine_rows`) the producer warpgroup's three idle warps run while
    /// the GEMM does (the backward's sum of dx rows over each token's slots); `tokens` 0: none.
    pub combine: Combine,
    /// 128-byte tensor maps \[E\]\[2\] (A's, then B's) in global memory, written by `wgrad_expert_maps` just before
    /// (kernel [`WgradMaps`]): expert e's map starts at its first row and ends at its last.
    pub expert_maps: u64,
    /// A's and B's first row (global addresses; rows of 2 M and 2 N bytes): what `wgrad_expert_maps` offsets.
    pub a_base: u64,
    pub b_base: u64,
    /// 1: launched as the 2-CTA cluster form (`grouped_wgrad_*_mc`: static pairs of m-tiles sharing B; m_tiles
    /// even); 0: single CTAs.
    pub clusters: u32,
    /// Rows A and B hold: each expert's rows are clamped to 0..rows_max (as `wgrad_expert_maps` clamps its maps),
    /// so offsets past it or decreasing read nothing outside the buffers and bound the contraction.
    pub rows_max: u32,
    /// The gathering producer's (`grouped_wgrad_*_ga*`) source of A: bf16 [tokens, M], row r of A being row
    /// `row_slot[r] / top_k` of it; or (`grouped_wgrad_*_gb`) of B: bf16 [tokens, N] alike (0 in the other kernels,
    /// which read A and B through their maps).
    pub a_gather: u64,
    /// u32 \[rows_max\]: each expert-ordered row's slot (`_ga` and `_gb` kernels).
    pub row_slot: u64,
    /// Slots per token (`_ga` and `_gb` kernels).
    pub top_k: u32,
    pub pad: u32,
}

/// The per-expert tensor maps of a weight gradient (kernel `wgrad_expert_maps`, launched just before the
/// `grouped_wgrad_*` that reads them): map \[e\]\[o\] = template o (A's or B's whole-buffer map) pointed at
/// base\[o\] + r0 * row_bytes\[o\] with max(r1 - r0, 1) rows, r1 = min(offsets[e + 1], rows_max) and
/// r0 = min(offsets\[e\], r1) (the expert's rows, inside the buffers whatever the offsets say).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct WgradMaps {
    /// The whole-buffer tensor maps of A and B (global memory).
    pub template: [u64; 2],
    /// A's and B's first row.
    pub base: [u64; 2],
    /// u32 [E + 1] row offsets.
    pub offsets: u64,
    /// The output: 128-byte tensor maps \[E\]\[2\], 128-byte aligned.
    pub out: u64,
    /// u32 \[1\]: the routing error word (as the weight gradient's: when set nothing is written); 0: none.
    pub error: u64,
    /// Bytes per row of A and B.
    pub row_bytes: [u32; 2],
    /// Experts.
    pub experts: u32,
    /// Rows A and B hold.
    pub rows_max: u32,
}

/// dtopk from the SwiGLU-backward partial sums (kernel `dtopk_reduce`): dtopk\[slot\] = sum over n-tiles of
/// partial[slot_row\[slot\]], 0 for masked slots.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct DtopkReduce {
    /// f32 [rows, n_tiles].
    pub partial: u64,
    /// i32 \[slots\].
    pub slot_row: u64,
    /// f32 \[slots\].
    pub dtopk: u64,
    /// u32 \[1\]: the routing error word of the forward (`Route::error`); when set the kernel writes nothing.
    /// 0: no word.
    pub error: u64,
    /// Slots.
    pub slots: u32,
    /// Partial sums per row.
    pub n_tiles: u32,
}

/// Arguments of the MN-major wgmma self-test: D[64, 128] (f32) = A . B with B stored [K, 128] row-major
/// (N-major) and A stored [64, K] (K-major, `trans_a = 0`) or [K, 64] (M-major, `trans_a = 1`), K = 64, both
/// loaded by TMA with 128-byte swizzle in boxes 64 wide; the descriptors of the MN-major operands use `lbo` and
/// `sbo` as given (the host tries the candidates).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct WgmmaMnTest {
    /// Tensor map of A.
    pub map_a: u64,
    /// Tensor map of B ([K, 128], box 64 x 64).
    pub map_b: u64,
    /// D, f32 [64, 128].
    pub d: u64,
    /// 1: A is M-major.
    pub trans_a: u32,
    /// Leading byte offset of the MN-major descriptors.
    pub lbo: u32,
    /// Stride byte offset of the MN-major descriptors.
    pub sbo: u32,
    /// Unused.
    pub pad: u32,
}

/// Most ranks a rank group holds (peer pointers), and most ranks one launch of the emulated form runs.
pub const MAX_RANKS: usize = 8;

/// The device-side description of a rank group, the same in every form (docs/EP.md): R ranks emulated on one
/// GPU (one launch, `rank = rank_base + block / blocks_per_rank`), or one launch per GPU (`rank_base` = that
/// GPU's rank, grid = `blocks_per_rank`). Only how `peer` is filled differs between the forms.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct RankGroup {
    /// Rank of the launch's first block group.
    pub rank_base: u32,
    /// Ranks in the group (R), 1..=8.
    pub world: u32,
    /// Unused (was the call's epoch, a parameter the host incremented per call, which a captured CUDA graph
    /// would replay unchanged; the epoch is now the counter at `ep::Workspace::epoch`, advanced on the device by
    /// `ep_epoch_next` at the start of every call).
    pub pad: u32,
    /// Blocks per rank in the dispatch and combine kernels (the same on every rank; flags per source).
    pub blocks_per_rank: u32,
    /// Bound of every wait, nanoseconds (`%globaltimer`).
    pub timeout_ns: u64,
    /// `peer[r]`: device address, valid on this GPU, of rank r's symmetric workspace (`ep::Workspace` layout).
    pub peer: [u64; MAX_RANKS],
}

/// Parameters of `ep_epoch_next`, the first launch of every expert-parallel call (forward or backward): it adds
/// 1 to the call counter (the epoch, u32 at `ep::Workspace::epoch`) of each rank the launch serves, so the call's
/// later kernels, which read the counter at their start, see the call's epoch (stream order), also when the
/// call is replayed from a CUDA graph. Every rank advances its counter once per call, so ranks that make the
/// same calls hold the same epoch in each call.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct EpEpoch {
    /// Address of each served rank's counter (`peer[r] + ws.epoch`); the first `ranks` used.
    pub counter: [u64; MAX_RANKS],
    /// Counters to advance, 0..=8 (R emulated ranks: all R; one rank per GPU: 1).
    pub ranks: u32,
    /// Unused.
    pub pad: u32,
}

/// One rank's own buffers for the dispatch and combine kernels (all on that rank's GPU).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct EpRank {
    /// bf16 [tokens, hidden]: the rank's tokens (forward: x; backward: dy).
    pub x: u64,
    /// i32 [tokens * k]: expert ids (global), -1 = masked.
    pub topk_ids: u64,
    /// f32 [tokens * k]: routing weights.
    pub w: u64,
    /// u32 \[experts\]: rows per global expert of this rank's slots (`route_scan`).
    pub counts: u64,
    /// u32 [experts + 1]: this rank's expert-ordered rows per expert (`route_scan`).
    pub offsets: u64,
    /// u32 [tokens * k]: slot of each expert-ordered row (`route_place`).
    pub row_slot: u64,
    /// i32 [tokens * k]: row of each slot, -1 when masked (`route_place`).
    pub slot_row: u64,
    /// bf16 [max_recv, hidden]: the rank's expert outputs over its receive buffer (combine reads them; the
    /// backward: dx rows).
    pub y: u64,
    /// Backward: f32 \[max_recv\], dtopk of each received row (travels back with the row).
    pub row_w: u64,
    /// bf16 [tokens, hidden]: the combined output (forward: out; backward: dx).
    pub out: u64,
    /// Backward: f32 [tokens * k], dtopk (0 for masked slots).
    pub dtopk: u64,
    /// Tokens of this rank (<= max_tokens).
    pub tokens: u32,
    /// Unused.
    pub pad: u32,
    /// u32 \[1\]: this rank's routing error word of the call's forward (set by `route_scan` when an expert id lies
    /// outside -1..E: its offsets are then zero and `route_place` did not run); 0: none. Such a rank sends the
    /// owners a count of zero for every expert (it sends no rows) and its combine writes none of its outputs.
    pub route_error: u64,
    /// FP8 forward (`EpParams::fp8`): f32 [tokens, hidden / 128], the 1 x 128 scales of `x`'s codes; else 0.
    pub x_scales: u64,
    /// A backward that dispatches its forward's rows again (`EpParams::resend_x`): the rank's x (bf16 [tokens,
    /// hidden]), or its e4m3 codes [tokens, hidden]; else 0.
    pub x2: u64,
    /// With `resend_x` = 2: f32 [tokens, hidden / 128], the scales of `x2`'s codes; else 0.
    pub x2_scales: u64,
}

/// Parameters of `ep_dispatch` and `ep_combine`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct EpParams {
    /// The rank group.
    pub group: RankGroup,
    /// The symmetric workspace layout (offsets from each `peer` base).
    pub ws: crate::ep::Workspace,
    /// The launch's ranks' own buffers: entry i is rank `rank_base + i`.
    pub ranks: [EpRank; MAX_RANKS],
    /// Experts E (global), a multiple of `world`.
    pub experts: u32,
    /// Slots per token.
    pub k: u32,
    /// Row length in bf16 elements (a multiple of 8).
    pub hidden: u32,
    /// m-tile of the grouped GEMMs (for the local tile offsets).
    pub tile_m: u32,
    /// Debug (fault tests): rank + 1 whose blocks skip their releases in phase `withhold_phase`; 0 = none.
    pub withhold_rank: u32,
    /// Debug: the `ep::Phase` code of the withheld releases.
    pub withhold_phase: u32,
    /// 0: forward (count all-gather and layout, x into `recv`; combine weights the rows by topk_w).
    /// 1: backward of the forward just before (its counts and layout; dy into `recv_dy`; combine sums the dx
    /// rows with weight 1 and returns each row's dtopk).
    pub backward: u32,
    /// Forward only: 1 = pull dispatch (docs/FUSED.md step 2): the sources push each row's weight and
    /// (rank, slot) and publish their x address, not the rows; the owner's GEMM1 copies the rows itself
    /// (`a_src_ranks`). 0 = push the rows.
    pub pull: u32,
    /// Forward only: 1 = the owners' GEMM2 wrote each row straight into its source's `back` slot
    /// (`c_dst_ranks`): `ep_combine` only releases the back flags before the sources sum. 0 = it copies the
    /// rows from the owner's y.
    pub scatter: u32,
    /// With the push (`pull` 0): 1 = the rows travel as blockwise FP8: each rank's `x` holds its tokens' e4m3 codes
    /// [tokens, hidden] (the forward's x, or the backward's dy) and `x_scales` their 1 x 128 scales, and an owner's
    /// `recv` (backward: `recv_dy`) receives the codes [max_recv, hidden] (bytes) followed by the scales f32
    /// [max_recv, hidden / 128] at `region + max_recv * hidden` (both inside the region's bf16 [max_recv, hidden]);
    /// `hidden` a multiple of 512. 0 = bf16 rows.
    pub fp8: u32,
    /// Backward only: 0 = the workspace still holds the forward's state (its gathered counts, local layout, the
    /// rows' weights and (rank, slot), the x rows in `recv`); the dispatch pushes dy alone. 1 or 2 = it does not
    /// (another forward ran since): the dispatch runs the forward's steps again (count all-gather, layout,
    /// weights and slots, over the routing the host laid out again from the same topk_ids) and pushes each row's
    /// x from `EpRank::x2` into `recv` besides its dy into `recv_dy`: 1 as bf16 rows, 2 as FP8 codes and scales
    /// (`x2_scales`, laid out as `fp8`'s).
    pub resend_x: u32,
    /// The host's number of the forward whose state this call leaves in (forward, backward with `resend_x`) or
    /// expects of (backward without) the workspace: the state tag (`ep::Workspace::epoch`'s second word). A
    /// backward that finds another tag records its epoch as the state error (the third word) and runs on.
    pub state: u32,
}

/// Blockwise FP8 quantization (kernels `quantize_fp8_rows`, `quantize_fp8_blocks`; [`crate::fp8`] gives the rule):
/// `x` bf16 [rows, cols] into e4m3 codes `q` [rows, cols] and f32 `scales`: [rows, cols / 128] for rows
/// (1 x 128 blocks), [rows / 128, cols / 128] for blocks (128 x 128).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct QuantFp8 {
    /// bf16 [rows, cols].
    pub x: u64,
    /// u8 [rows, cols].
    pub q: u64,
    /// f32 scales.
    pub scales: u64,
    /// `quantize_fp8_rows` only: u32 \[1\] holding the row count on the device (clamped to `rows`), or 0 (`rows`
    /// rows); e.g. a rank's received rows at expert parallelism, which the host never learns.
    pub rows_at: u64,
    /// Rows (a multiple of 128 for blocks); with `rows_at`, the most the buffers hold.
    pub rows: u32,
    /// Columns (a multiple of 128).
    pub cols: u32,
}

/// Transposing blockwise FP8 quantization (kernel `quantize_fp8_blocks_t`): each batch of `x` bf16 [B, R, C]
/// into codes [B, C, R] and scales [B, C / 128, R / 128].
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct QuantFp8T {
    /// bf16 [B * R, C].
    pub x: u64,
    /// u8 [B * C, R].
    pub q: u64,
    /// f32 [B * C / 128, R / 128].
    pub scales: u64,
    /// R, rows of each batch (a multiple of 128).
    pub batch_rows: u32,
    /// C (a multiple of 128).
    pub cols: u32,
}

/// Transposing quantization for the K-grouped FP8 weight gradients (kernel `quantize_fp8_cols_grouped`): the
/// expert-ordered rows x [rows, C] become codes [C, Kp] K-major (row c of q: column c of x along the rows) in
/// 1 x 128 blocks along the rows that never span two experts: expert e's segment starts at column 128
/// tile_offsets\[e\] of q (its m-tile offsets) and its last block is zero-padded. Scales [Kp / 128, C] (a K block's
/// scales of a tile's columns contiguous, for the GEMM to stage them per stage). Blocks
/// past tile_offsets\[E\] are not written.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct QuantFp8Cols {
    /// bf16 [rows_max, C].
    pub x: u64,
    /// u8 [C, Kp].
    pub q: u64,
    /// f32 [Kp / 128, C].
    pub scales: u64,
    /// u32 [E + 1] row offsets (device).
    pub offsets: u64,
    /// u32 [E + 1] m-tile offsets (device; tiles of 128 rows).
    pub tile_offsets: u64,
    /// E.
    pub experts: u32,
    /// C (a multiple of 128).
    pub cols: u32,
    /// Kp: q's columns (a multiple of 128, at least 128 tile_offsets\[E\]).
    pub kp: u32,
    /// Rows x has room for.
    pub rows_max: u32,
    /// 1: one scale per 128 x 128 block (128 rows of one expert, 128 columns), scales [Kp / 128, C / 128]; 0: one
    /// per 128 rows and column, [Kp / 128, C].
    pub block: u32,
    /// Slots per token (top-k) when gathering (`row_slot` non-zero).
    pub top_k: u32,
    /// 0: row r of the expert order is row r of x. Otherwise u32 \[rows_max\]: row r is x's row row_slot\[r\] / top_k
    /// (x then holds the tokens [src_rows, C]: the gather of the expert order fused into the quantization).
    pub row_slot: u64,
    /// 0, or bf16 [rows_max, C]: each expert-ordered row read is also stored here (the gathered bf16 copy).
    pub copy: u64,
    /// 0, or e4m3 [rows_max, C]: the rows also quantized row-wise in 1 x 128 blocks (the rule of
    /// `quantize_fp8_rows`: bitwise its codes), from the same read.
    pub q_rows: u64,
    /// f32 [rows_max, C / 128]: the row-wise scales (with `q_rows`).
    pub s_rows: u64,
    /// 0, or (gathering) f32 [tokens * top_k]: each gathered row scaled by its slot's routing weight before it is
    /// quantized (the copy stays unscaled): (s dy)^T, dW2's A when its B is h.
    pub w: u64,
    /// Rows x holds when gathering (a token past it reads as zeros).
    pub src_rows: u32,
    /// Unused (the block stays whole 8-byte words).
    pub pad: u32,
}

/// K-grouped weight gradient in blockwise FP8 (kernels `grouped_wgrad_fp8_f32` / `_bf16`): for each expert e,
/// C_e[M, N] (+)= sum over its K blocks kb (tile_offsets\[e\] .. tile_offsets[e + 1]) of sa[kb, m] sb[kb, n]
/// (A^T[m, kb] . B^T[n, kb]), with A^T e4m3 [M, Kp] and B^T e4m3 [N, Kp] as `quantize_fp8_cols_grouped` writes
/// them (K-major, each expert's rows zero-padded to 128) and their scales [Kp / 128, M] and [Kp / 128, N].
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct WgradFp8 {
    /// Tensor map of A^T: u8 [M, Kp], box 128 x 128, 128-byte swizzle.
    pub map_a: u64,
    /// Tensor map of B^T: u8 [N, Kp], box 128 x 128, 128-byte swizzle.
    pub map_b: u64,
    /// f32 [Kp / 128, M].
    pub sa: u64,
    /// f32 [Kp / 128, N]; for the `grouped_wgrad_fp8b_*` kernels [Kp / 128, N / 128] (one scale per 128 x 128
    /// block: `quantize_fp8_cols_grouped` with `block`).
    pub sb: u64,
    /// u32 [E + 1]: each expert's K blocks (its m-tile offsets).
    pub tile_offsets: u64,
    /// f32 or bf16 [E * M, N].
    pub c: u64,
    /// Tensor map of C as [E * M, N] in the weight-gradient epilogue's boxes (`WGRAD_C_BOX` f32 or
    /// `WGRAD_C_BOX_BF16` bf16, 128-byte swizzle): the epilogue stores, or adds, through it.
    pub map_c: u64,
    /// 0, or the routing error word (u32): when it is set the kernel writes nothing.
    pub error: u64,
    /// E.
    pub experts: u32,
    /// M (a multiple of 128).
    pub m: u32,
    /// N (a multiple of 128).
    pub n: u32,
    /// Add into C instead of overwriting it.
    pub accumulate: u32,
    /// Kp / 128: K blocks the operands hold (an expert's blocks past it are not read).
    pub kblocks: u32,
    /// Unused (the block stays whole 8-byte words).
    pub pad: u32,
    /// u32 \[1\], zeroed by the host before the launch: the run-time tile counter (as `WgradGemm::sched`); 0: every
    /// block takes every grid-th tile.
    pub sched: u64,
    /// The `_mv` kernels: a combine (as `combine_rows`) the producer warpgroup's three idle warps run meanwhile
    /// (as `grouped_wgrad_f32_mv`'s); unused by the others.
    pub combine: Combine,
}

/// M-grouped GEMM in blockwise FP8 (kernel `grouped_gemm_fp8`): for each expert e and its rows
/// offsets\[e\]..offsets[e + 1], C[r, n] = sum over 128-blocks kb of K of sa[r, kb] * sb[e, n / 128, kb] *
/// (A[r, kb] . B_e[n, kb]) in f32, stored as bf16: A e4m3 [rows, K] with 1 x 128 scales, B e4m3 [E * N, K]
/// (K-major) with 128 x 128 scales. Tiles of 128 rows x 128 columns; each 128-deep block's product is
/// promoted into the f32 accumulator with its two scales (the tensor cores' accumulation never spans more).
/// `grouped_gemm_fp8` stores C through shared memory and the copy engine, `grouped_gemm_fp8_regs` from registers.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct GroupedGemmFp8 {
    /// Tensor map of A: u8 [rows_max, K], box 128 x 128 rows, 128-byte swizzle.
    pub map_a: u64,
    /// Tensor map of B: u8 [E * N, K], box 128 x 128 rows, 128-byte swizzle.
    pub map_b: u64,
    /// f32 [rows_max, K / 128].
    pub sa: u64,
    /// f32 [E * N / 128, K / 128].
    pub sb: u64,
    /// u32 [E + 1] row offsets.
    pub offsets: u64,
    /// u32 [E + 1] m-tile offsets (tiles of 128 rows).
    pub tile_offsets: u64,
    /// bf16 [rows_max, N] (with h quantized in the epilogue: e4m3 codes, u8 [rows_max, N]).
    pub c: u64,
    /// u32 routing error word (nothing runs when set); 0 for none.
    pub error: u64,
    /// Tensor map of C as bf16 [rows_max, N], box 64 x 64, 128-byte swizzle: the staged epilogue stores whole
    /// 64-row groups of one expert through it (`grouped_gemm_fp8`; the others from registers). With h quantized
    /// (`grouped_gemm_fp8_swiglu_q`): C is h's e4m3 codes, u8 [rows_max, N], box 128 x 64 rows.
    pub map_c: u64,
    /// `grouped_gemm_fp8_swiglu_q`: f32 [rows_max, N / 128], h's 1 x 128 scales; `grouped_gemm_fp8w_swiglu_zt`:
    /// f32 [Kp / 128, N / 128], h's 128 x 128 block scales; 0 otherwise.
    pub c_scales: u64,
    /// `grouped_gemm_fp8w_swiglu_zt`: e4m3 [N, Kp], h transposed per expert in 128 x 128 blocks (the weight
    /// gradient dW2's B operand, as `quantize_fp8_cols_grouped` with `block` writes it); 0 otherwise.
    pub ct: u64,
    /// `grouped_gemm_fp8w_swiglu_qz`: z, bf16 [rows, 2N] (the rows the call routes: at most `rows_max`); 0 otherwise.
    pub z: u64,
    /// Tensor map of z, bf16 [rows, 2N], box 64 x 64, 128-byte swizzle: `grouped_gemm_fp8w_swiglu_qz` stores z
    /// through it; `grouped_gemm_fp8w_dswiglu[_gather]` (required there) prefetch the z their epilogue reads into L2
    /// through it; 0 otherwise.
    pub map_z: u64,
    /// `grouped_gemm_fp8w_cpx` (the side copy, by the producer warpgroup's idle warps while the GEMM runs): the
    /// tokens' rows, bf16 [tokens, copy_cols]; 0 otherwise.
    pub a_rows: u64,
    /// `grouped_gemm_fp8w_cpx`: where row r of the routing goes, bf16 [rows_max, copy_cols]: token
    /// row_slot\[r\] / top_k's row; 0 otherwise.
    pub a_copy: u64,
    /// `grouped_gemm_fp8w_cpx`: u32 \[rows_max\], the slot of each expert-ordered row; `grouped_gemm_fp8w_dswiglu`:
    /// the same, for the rows' routing weights; 0 otherwise.
    pub row_slot: u64,
    /// `grouped_gemm_fp8w_dswiglu`: f32 \[w_len\], the routing weight of each slot (s = w\[row_slot\[row\]\]); 0
    /// otherwise.
    pub w: u64,
    /// `grouped_gemm_fp8w_dswiglu`: f32 [rows_max, N / 256], each row's dtopk partial sum of a tile (sum over the
    /// tile's columns of dh h), the layout `dtopk_reduce` reads; 0 otherwise.
    pub partial: u64,
    /// `grouped_gemm_fp8w_dswiglu`: bf16 [rows_max, N], s h (dW2's B); 0 otherwise.
    pub sh: u64,
    /// `grouped_gemm_fp8w_dswiglu`: tensor map of `sh`, box 64 x 64, 128-byte swizzle (with `map_c`, dz's map
    /// [rows_max, 2N] in the same boxes, the whole 64-row groups' stores go through the copy engine); 0 otherwise.
    pub map_sh: u64,
    /// Experts.
    pub experts: u32,
    /// Columns N per expert (a multiple of 128).
    pub n: u32,
    /// Contraction K (a multiple of 128).
    pub k: u32,
    /// Rows of A, scales and C (rows at or past it are never read or written).
    pub rows_max: u32,
    /// `grouped_gemm_fp8w_swiglu_zt`: Kp, `ct`'s columns; 0 otherwise.
    pub kp: u32,
    /// `grouped_gemm_fp8w_cpx`: slots per token; 0 otherwise.
    pub top_k: u32,
    /// `grouped_gemm_fp8w_cpx`: the copied rows' bf16 columns (a multiple of 8); 0 otherwise.
    pub copy_cols: u32,
    /// `grouped_gemm_fp8w_dswiglu`: entries of `w` (a slot at or past it takes weight 0); 0 otherwise.
    pub w_len: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::size_of;

    #[test]
    fn parameter_blocks_are_whole_8_byte_words_without_padding() {
        // every block is u64 fields then u32 fields in pairs: no implicit padding, a multiple of 8 bytes
        let sizes = [
            ("Route", size_of::<Route>(), 10 * 8 + 4 * 4),
            ("MatrixTest", size_of::<MatrixTest>(), 3 * 8),
            ("Gather", size_of::<Gather>(), 4 * 8 + 4 * 4),
            ("GatherDequant", size_of::<GatherDequant>(), 5 * 8 + 4 * 4),
            ("QuantFp8", size_of::<QuantFp8>(), 4 * 8 + 2 * 4),
            ("QuantFp8T", size_of::<QuantFp8T>(), 3 * 8 + 2 * 4),
            ("QuantFp8Cols", size_of::<QuantFp8Cols>(), 10 * 8 + 8 * 4),
            ("WgradFp8", size_of::<WgradFp8>(), 9 * 8 + 6 * 4 + size_of::<Combine>()),
            ("GroupedGemmFp8", size_of::<GroupedGemmFp8>(), 20 * 8 + 8 * 4),
            ("Combine", size_of::<Combine>(), 5 * 8 + 4 * 4),
            ("GroupedGemm", size_of::<GroupedGemm>(), 22 * 8 + 12 * 4),
            ("WgradGemm", size_of::<WgradGemm>(), 12 * 8 + 10 * 4 + size_of::<Combine>()),
            ("WgradMaps", size_of::<WgradMaps>(), 7 * 8 + 4 * 4),
            ("FusedFfn", size_of::<FusedFfn>(), 2 * size_of::<GroupedGemm>() + 3 * 8 + 2 * 4),
            ("DtopkReduce", size_of::<DtopkReduce>(), 4 * 8 + 2 * 4),
            ("EpEpoch", size_of::<EpEpoch>(), MAX_RANKS * 8 + 2 * 4),
            ("RankGroup", size_of::<RankGroup>(), 4 * 4 + 8 + MAX_RANKS * 8),
            (
                "EpParams",
                size_of::<EpParams>(),
                size_of::<RankGroup>() + size_of::<crate::ep::Workspace>() + MAX_RANKS * size_of::<EpRank>() + 12 * 4,
            ),
            ("EpRank", size_of::<EpRank>(), 15 * 8 + 2 * 4),
            ("TmaRowsTest", size_of::<TmaRowsTest>(), 5 * 8 + 2 * 4),
            ("TmaMcTest", size_of::<TmaMcTest>(), 2 * 8 + 2 * 4),
        ];
        for (name, got, fields) in sizes {
            assert_eq!(got, fields, "{name}: padding between fields");
            assert_eq!(got % 8, 0, "{name}: not a multiple of 8 bytes");
        }
    }
}

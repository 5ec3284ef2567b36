//! The backward's dh GEMM with the SwiGLU backward, its epilogue in a warpgroup of its own
//! (`grouped_gemm_bt_dswiglu_ew`): the same outputs as `grouped_gemm_bt_dswiglu` (dz = [dg | du], s h, the dtopk
//! partial sums), computed from dh rounded to bf16.
//!
//! Why: the ping-pong kernel hides its epilogue under the other warpgroup's main loop, but its 128 x 128 tiles read
//! a third more operand bytes per FLOP from L2 than the cooperative 128 x 256 tile, and L2 bounds it (~76% busy,
//! docs/NOTES.md). Here the main loop is the plain dh GEMM's (cooperative 128 x 256, B N-major) and the epilogue
//! runs beside it: at a tile's end the consumers write dh into a bf16 tile in shared memory and go on to the next
//! tile at once; the epilogue warpgroup computes the SwiGLU backward of that tile from it while they run.
//!
//! Block: 3 warpgroups. 0: thread 0 is the producer (the TMA loads of a 3-stage ring of A 128 x 64 and B 64 K x
//! 256 N, as `grouped_gemm_bt_bf16`), warps 1..3 the epilogue; 1 and 2: the consumers (wgmma m64n256k16, 64 rows
//! each). (A fourth warpgroup for the epilogue does not compile: 512 threads cap ptxas at 128 registers for the
//! whole kernel, setmaxnreg regions included, and a wgmma m64n256 needs more.)
//! Shared memory: the ring (3 x 48 KiB), the dh tile (128 x 256 bf16, 64 KiB; 16-byte chunk j of row r at chunk
//! j ^ (r % 8), so the consumers' fragment stores and the epilogue's row reads are free of bank conflicts), the
//! ring's mbarriers, the dh tile's `full` (256 arrivals: every consumer thread after its stores) and `empty` (96:
//! every epilogue thread after its reads) mbarriers; the scheduler's offsets where the cooperative kernels keep
//! them (the launch has their shared memory, `SMEM_BYTES`). Registers (setmaxnreg): warpgroup 0 152 (at 88 ptxas
//! spilled the epilogue; 152 holds the next step's z beside this step's), the consumers 176 (128 x 152 + 256 x 176
//! = 384 x 168, what the launch allocates; ptxas compiles the consumers within the launch's 168 anyway).
//!
//! The epilogue warps: warp w (0..3) takes rows w, w + 3, .. of the tile, four rows a step; lane l its columns
//! n_tile * 256 + 8 l .. + 8: 16-byte loads of g, u (z = [g | u], bf16 [rows, 2 n]) issued a step ahead (the first
//! step's before the wait for dh: z does not depend on it), 16-byte loads of dh, [`dswiglu_elem`] per element,
//! 16-byte stores of dg, du (into dz, bf16 [rows, 2 n]) and of s h (into `sh`, bf16 [rows, n], when set), and the
//! rows' partial sums of dh h over the tile's columns (each lane's eight in order, then the four rows over the warp
//! in six shuffles, the order of a butterfly 16, 8, 4, 2, 1: the same for a row wherever it falls in a tile) into
//! partial[row, n_tile]. Rows past the expert's end and columns past n are neither read nor written.
//! Measured (docs/RESULTS.md 2026-12-04b, 30B under ncu): 768 us against the ping-pong kernel's 836; the
//! consumers' largest wait is now the ring's (3 stages: the dh tile takes the fourth's shared memory).
use crate::kernels::grouped_gemm::{
    dswiglu_elem, frag, mainloop_coop, produce, sched_copy, t_lane, tile_info, walk, walk_tile, BK, SMEM_BYTES,
    STAGE_BYTES,
};
use crate::params::GroupedGemm;
use crate::pipeline::Ring;
use crate::ptx::{global, math, mbarrier, regs, smem, sync, warp};

/// Ring stages.
const S: u32 = crate::kernels_host::GEMM_EW_STAGES;
/// Columns of a tile.
const BN: u32 = crate::kernels_host::GEMM_BN;
/// Bytes of a row of the dh tile.
const DH_ROW: u32 = BN * 2;
/// Shared-memory offset of the dh tile (after the ring).
const DH_AT: u32 = S * STAGE_BYTES;
/// Shared-memory offset of the mbarriers: the ring's, then the dh tile's full and empty.
const BARS_AT: u32 = DH_AT + crate::kernels_host::GEMM_BM * DH_ROW;
const END: u32 = BARS_AT + Ring::<S>::BYTES + 16;
const _: () =
    assert!(END <= SMEM_BYTES - crate::kernels_host::GEMM_SCHED, "the layout overlaps the scheduler's offsets");
const _: () = assert!(DH_AT % 1024 == 0, "the ring's stages keep their 1024-byte alignment");
/// Registers of warpgroup 0 (the producer thread and the epilogue warps) and of each consumer thread.
const PRODUCER_REGS: u32 = 152;
const CONSUMER_REGS: u32 = 176;
const _: () = assert!(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= 384 * 168, "setmaxnreg.inc would wait forever");
/// Epilogue warps (warps 1..3 of warpgroup 0) and the rows each takes at most.
const EW: u32 = 3;
const EW_ROWS: u32 = crate::kernels_host::GEMM_BM.div_ceil(EW);

/// The dh GEMM (A = dy rows, B_e = W2_e stored [K, N]) with the SwiGLU backward by an epilogue warpgroup (see the
/// module). 384 threads, `SMEM_BYTES` of dynamic shared memory, grid <= the SM count; `n_tiles` = n / 256 rounded
/// up (the partial sums' columns); n a multiple of 64.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_dswiglu_ew(p: GroupedGemm) {
    let base = smem::base();
    let ring = Ring::<S>::at(base + BARS_AT);
    let dh = base + DH_AT;
    let full = base + BARS_AT + Ring::<S>::BYTES;
    let empty = full + 8;
    let t = regs::tid();
    let wg = t / 128;
    if t == 0 {
        mbarrier::init(full, 256);
        mbarrier::init(empty, 32 * EW);
        // both consumer warpgroups' 8 warps give a stage back (init's fence publishes the dh barriers too)
        ring.init(8);
    }
    sched_copy::<false>(&p);
    sync::block_sync();
    // read by each role after its register reallocation (a value live across it may be spilled)
    let total = || *(p.tile_offsets as *const u32).add(p.experts as usize) * p.n_tiles;
    let kt_n = p.k / BK;
    if wg == 0 {
        regs::setmaxnreg_dec::<PRODUCER_REGS>();
        if t == 0 {
            produce::<false, true, false, S, 0, false>(&p, base, ring, total(), kt_n);
        } else if t >= 32 {
            epilogue(&p, dh, (full, empty), total());
        }
    } else {
        regs::setmaxnreg_inc::<CONSUMER_REGS>();
        consume(&p, base, ring, dh, (full, empty), total(), kt_n, wg - 1);
    }
}

/// A consumer warpgroup: every tile of the block's walk, its rows 64 cw .. 64 cw + 64 (the plain dh main loop),
/// then dh into the tile in shared memory once the epilogue warpgroup has read the previous one (`empty`), and an
/// arrival on `full`. SAFETY: the 128 threads of consumer warpgroup `cw`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn consume(
    p: &GroupedGemm,
    base: u32,
    ring: Ring<S>,
    dh: u32,
    (full, empty): (u32, u32),
    total: u32,
    kt_n: u32,
    cw: u32,
) {
    let lane = t_lane();
    let (r0, r1, c0) = frag();
    let mut it = 0u32;
    let mut handed = 0u32;
    let (q0, step, count) = walk::<0>(p, total);
    let mut q = q0;
    while q < count {
        let acc = mainloop_coop::<true, false, 0, S>(base, &ring, &mut it, kt_n, cw, lane);
        // the epilogue warpgroup is done with the previous tile's dh (the first wait returns at once)
        mbarrier::wait_parity(empty, (handed & 1) ^ 1);
        crate::unroll!(H in [0, 1] {
            let r = 64 * cw + if H == 0 { r0 } else { r1 };
            let row = dh + r * DH_ROW + 2 * c0;
            crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31] {
                let v = math::pack_bf16x2(acc[4 * J + 2 * H], acc[4 * J + 2 * H + 1]);
                smem::st_u32(row + ((J as u32 ^ (r % 8)) * 16), v);
            });
        });
        // this thread's stores before its arrival (release); the epilogue's wait acquires them
        mbarrier::arrive(full);
        handed += 1;
        q += step;
    }
}

/// The epilogue warps (see the module). SAFETY: threads 32..128 of warpgroup 0, in uniform control flow per warp.
#[inline(always)]
unsafe fn epilogue(p: &GroupedGemm, dh: u32, (full, empty): (u32, u32), total: u32) {
    let t = regs::tid();
    let (w, lane) = (t / 32 - 1, t % 32);
    let n = p.n;
    // 16-byte chunks: z and dz rows hold 2 n / 8, sh rows n / 8
    let z = p.z as *const [u32; 4];
    let dz = p.c as *mut [u32; 4];
    let sh = p.sh as *mut [u32; 4];
    let mut taken = 0u32;
    let (q0, step, count) = walk::<0>(p, total);
    let mut q = q0;
    while q < count {
        let ti = tile_info::<false>(p, walk_tile::<0>(p, q).0);
        let col = ti.n_tile * BN + 8 * lane;
        let live = col < n;
        // lane l reads the routing weights of the warp's rows l and 32 + l (tile rows w + 3 l, w + 3 (32 + l)) now:
        // their latency hides under the wait; row i's step takes its weight by a shuffle
        let weight = |i: u32| {
            let row = ti.row0 + w + EW * i;
            if i < EW_ROWS && w + EW * i < crate::kernels_host::GEMM_BM && row < ti.row_end {
                // SAFETY: row < offsets[E] <= rows_max (row_slot's length); row_slot[row] < slots, w's length (the
                // caller's promise, as for the ping-pong kernel)
                *(p.w as *const f32).add(*(p.row_slot as *const u32).add(row as usize) as usize)
            } else {
                0.0
            }
        };
        // the tile row of the warp's step i (rows past the tile read row 0's dh and store nothing) and whether it
        // is stored
        let tile_row = |i: u32| {
            let r = w + EW * i;
            (
                if r < crate::kernels_host::GEMM_BM { r } else { 0 },
                r < crate::kernels_host::GEMM_BM && ti.row0 + r < ti.row_end,
            )
        };
        // g and u of the warp's steps l .. l + 4 (zeros past the expert's end or n: never stored)
        let load_z = |l: u32| {
            let mut g = [[0u32; 4]; 4];
            let mut u = [[0u32; 4]; 4];
            crate::unroll!(B in [0, 1, 2, 3] {
                let (r, in_rows) = tile_row(l + B as u32);
                if live && in_rows && l + (B as u32) < EW_ROWS {
                    // SAFETY: a row of the expert (< offsets[E]) and 8 columns below n: inside z [rows_max, 2 n]
                    let zr = z.add((((ti.row0 + r) * 2 * n + col) / 8) as usize);
                    g[B] = global::ld_v4(zr);
                    u[B] = global::ld_v4(zr.add((n / 8) as usize));
                }
            });
            (g, u)
        };
        let (s_lo, s_hi) = (weight(lane), weight(32 + lane));
        // the first step's z does not depend on dh: its loads wait beside the consumers' main loop
        let (mut g, mut u) = load_z(0);
        mbarrier::wait_parity(full, taken & 1);
        let mut l = 0u32;
        while l < EW_ROWS {
            let mut d = [[0u32; 4]; 4];
            crate::unroll!(B in [0, 1, 2, 3] {
                let r = tile_row(l + B as u32).0;
                d[B] = smem::ld_v4(dh + r * DH_ROW + ((lane ^ (r % 8)) * 16));
            });
            // the next step's z in flight while this one computes (software pipelining: its latency was the
            // epilogue's largest stall)
            let (g_next, u_next) = load_z(l + 4);
            let mut part = [0f32; 4];
            crate::unroll!(B in [0, 1, 2, 3] {
                let i = l + B as u32;
                let row = ti.row0 + tile_row(i).0;
                // uniform in the warp: row i's weight from lane i % 32 of the low or high half
                let s = f32::from_bits(warp::shfl_idx(if i < 32 { s_lo } else { s_hi }.to_bits(), i % 32));
                let (mut dg, mut du, mut hs) = ([0u32; 4], [0u32; 4], [0u32; 4]);
                crate::unroll!(J in [0, 1, 2, 3] {
                    let mut o = [[0f32; 2]; 3];
                    crate::unroll!(Q in [0, 1] {
                        let gv = math::bf16_to_f32((g[B][J] >> (16 * Q)) as u16);
                        let uv = math::bf16_to_f32((u[B][J] >> (16 * Q)) as u16);
                        let dv = math::bf16_to_f32((d[B][J] >> (16 * Q)) as u16);
                        let (x0, x1, x2) = dswiglu_elem(gv, uv, dv, s, &mut part[B]);
                        o[0][Q] = x0;
                        o[1][Q] = x1;
                        o[2][Q] = x2;
                    });
                    dg[J] = math::pack_bf16x2(o[0][0], o[0][1]);
                    du[J] = math::pack_bf16x2(o[1][0], o[1][1]);
                    hs[J] = math::pack_bf16x2(o[2][0], o[2][1]);
                });
                if live && tile_row(i).1 && i < EW_ROWS {
                    // SAFETY: as z's loads: inside dz [rows_max, 2 n] and sh [rows_max, n]; each element has one writer
                    let at = ((row * 2 * n + col) / 8) as usize;
                    global::st_v4(dz.add(at), dg);
                    global::st_v4(dz.add(at + (n / 8) as usize), du);
                    if p.sh != 0 {
                        global::st_v4(sh.add(((row * n + col) / 8) as usize), hs);
                    }
                }
                // a lane past n adds 0 to the row's partial
                if !live {
                    part[B] = 0.0;
                }
            });
            // the four rows' partials over the warp in six shuffles: pairs of lanes 16 apart add rows 0, 1 (low
            // lane) or 2, 3 (high), then 8 apart rows 0 or 1 of the pair, then 4, 2, 1: lane 8 j ends with row j's
            // sum. Each step adds the values of lanes l and l ^ X, as the plain butterfly 16, 8, 4, 2, 1 does, so a
            // row's sum is the same wherever it falls in a step (f32 addition commutes).
            let hi16 = lane & 16 != 0;
            let (k0, k1, s0, s1) =
                if hi16 { (part[2], part[3], part[0], part[1]) } else { (part[0], part[1], part[2], part[3]) };
            let a0 = k0 + f32::from_bits(warp::shfl_xor(s0.to_bits(), 16));
            let a1 = k1 + f32::from_bits(warp::shfl_xor(s1.to_bits(), 16));
            let hi8 = lane & 8 != 0;
            let (k, o) = if hi8 { (a1, a0) } else { (a0, a1) };
            let mut sum = k + f32::from_bits(warp::shfl_xor(o.to_bits(), 8));
            crate::unroll!(X in [4, 2, 1] {
                sum += f32::from_bits(warp::shfl_xor(sum.to_bits(), X as u32));
            });
            if lane % 8 == 0 {
                let i = l + lane / 8;
                let (r, in_rows) = tile_row(i);
                if in_rows && i < EW_ROWS {
                    // SAFETY: row < offsets[E], n_tile < n_tiles: inside partial [rows_max, n_tiles]
                    *(p.partial as *mut f32).add(((ti.row0 + r) * p.n_tiles + ti.n_tile) as usize) = sum;
                }
            }
            g = g_next;
            u = u_next;
            l += 4;
        }
        // every read of this tile's dh is done: the consumers may write the next
        mbarrier::arrive(empty);
        taken += 1;
        q += step;
    }
}

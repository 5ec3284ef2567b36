//! Host drivers of the device self-tests: each runs one primitive of `kernels-gpu/src/ptx` alone on fresh
//! random data, into poisoned outputs, and checks the result against a host computation. The GPU tests and the
//! main command's GPU self-check both call these.
use megamoe_kernels::params::{
    FlagTest, MatrixTest, MbarrierTest, TmaMcTest, TmaRowsTest, TmaTest, WgmmaTest, STATUS_TIMEOUT,
};
use megamoe_kernels::swizzle;

use crate::check;
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::runtime::{dptr, Gpu, Launch};
use crate::tensor_map::{DeviceTensorMap, Dtype, Swizzle, TiledDesc};

fn fail(what: String) -> Error {
    Error::Mismatch(format!("self-test: {what}"))
}

/// wgmma m64nNk16 (N = 64, 128 or 256) fed by TMA with 128-byte swizzle, or with `interleave` (N = 64 only) fed
/// by ordinary stores in the no-swizzle core-matrix layout. Returns the relative error against f64.
pub fn wgmma(gpu: &Gpu, rng: &mut Rng, n: u32, interleave: bool) -> Result<f64> {
    let (m, k) = (64usize, 256usize);
    let n_us = n as usize;
    let kernel = match (n, interleave) {
        (64, false) => "selftest_wgmma_n64",
        (128, false) => "selftest_wgmma_n128",
        (256, false) => "selftest_wgmma_n256",
        (64, true) => "selftest_wgmma_n64_interleave",
        _ => return Err(Error::InvalidArgument(format!("no wgmma self-test for N = {n}, interleave = {interleave}"))),
    };
    let a = rng.bf16_vec(m * k, 1.0);
    let b = rng.bf16_vec(n_us * k, 1.0);
    let da = gpu.upload(&a)?;
    let db = gpu.upload(&b)?;
    let mut dd = gpu.alloc::<f32>(m * n_us)?;
    gpu.fill_bytes(&mut dd, 0xff)?;
    let s = gpu.stream();
    let map_a = DeviceTensorMap::new(
        gpu,
        TiledDesc::row_major_2d(Dtype::Bf16, dptr(&da, s), m as u64, k as u64, 64, 64, Swizzle::B128),
    )?;
    let map_b = DeviceTensorMap::new(
        gpu,
        TiledDesc::row_major_2d(Dtype::Bf16, dptr(&db, s), n as u64, k as u64, n, 64, Swizzle::B128),
    )?;
    let p = WgmmaTest {
        map_a: map_a.ptr(gpu),
        map_b: map_b.ptr(gpu),
        a: dptr(&da, s),
        b: dptr(&db, s),
        d: dptr(&dd, s),
        k: k as u32,
        pad: 0,
    };
    let smem = (64 + n) * 128 + 16;
    // SAFETY: the parameter block matches the kernel; every buffer has the sizes above.
    unsafe { gpu.launch(kernel, Launch::new(1, 128, smem), &p)? };
    gpu.sync()?;
    let d: Vec<f64> = gpu.download(&dd)?.iter().map(|&v| v as f64).collect();
    let mut want = vec![0.0f64; m * n_us];
    for r in 0..m {
        for c in 0..n_us {
            want[r * n_us + c] = (0..k).map(|q| a[r * k + q].to_f64() * b[c * k + q].to_f64()).sum();
        }
    }
    check::close(&format!("{kernel}: D"), &d, &want, 1e-5).map_err(fail)
}

/// TMA tensor round trip: a bf16 tensor of `dims` (innermost first, 2 or 3 of them) is copied box by box into
/// a poisoned destination through shared memory; the destination must equal the source byte for byte, the
/// guard after it must stay poisoned, and each raw shared tile must hold its box at the offsets the swizzle
/// math of `kernels-gpu` predicts (zeros where the box leaves the tensor).
pub fn tma_round_trip(gpu: &Gpu, rng: &mut Rng, dims: &[u64], box_dims: &[u32], swz: Swizzle) -> Result<()> {
    let rank = dims.len();
    if !(2..=3).contains(&rank) || box_dims.len() != rank {
        return Err(Error::InvalidArgument("tma_round_trip takes 2 or 3 dimensions".into()));
    }
    let total: usize = dims.iter().product::<u64>() as usize;
    let guard = 4096usize;
    let src: Vec<u16> = (0..total).map(|_| (rng.next_u64() as u16) | 1).collect(); // never 0 (OOB fill) or 0xffff
    let dsrc = gpu.upload(&src)?;
    let mut ddst = gpu.alloc::<u16>(total + guard)?;
    gpu.fill_bytes(&mut ddst, 0xff)?;
    let s = gpu.stream();
    let mut strides = vec![dims[0] * 2];
    if rank == 3 {
        strides.push(dims[0] * dims[1] * 2);
    }
    let desc = |addr| TiledDesc {
        dtype: Dtype::Bf16,
        addr,
        dims: dims.to_vec(),
        strides: strides.clone(),
        box_dims: box_dims.to_vec(),
        swizzle: swz,
    };
    let msrc = DeviceTensorMap::new(gpu, desc(dptr(&dsrc, s)))?;
    let mdst = DeviceTensorMap::new(gpu, desc(dptr(&ddst, s)))?;
    let mut bx = [1u32; 3];
    let mut bd = [1u32; 3];
    for d in 0..rank {
        bx[d] = dims[d].div_ceil(box_dims[d] as u64) as u32;
        bd[d] = box_dims[d];
    }
    let box_bytes = bd.iter().product::<u32>() * 2;
    let blocks = bx.iter().product::<u32>();
    let mut dump = gpu.alloc::<u8>((blocks * box_bytes) as usize)?;
    gpu.fill_bytes(&mut dump, 0xee)?;
    let p = TmaTest {
        map_src: msrc.ptr(gpu),
        map_dst: mdst.ptr(gpu),
        smem_dump: dptr(&dump, s),
        box_dims: bd,
        boxes: bx,
        box_bytes,
        pad: 0,
    };
    let kernel = if rank == 2 { "selftest_tma_2d" } else { "selftest_tma_3d" };
    // SAFETY: matches the kernel's parameter block; the dump holds one box per block.
    unsafe { gpu.launch(kernel, Launch::new(blocks, 128, box_bytes + 16), &p)? };
    gpu.sync()?;
    let dst = gpu.download(&ddst)?;
    if let Some(i) = (0..total).find(|&i| dst[i] != src[i]) {
        return Err(fail(format!(
            "{kernel} ({swz:?}): destination element {i} is {:#x}, source {:#x}",
            dst[i], src[i]
        )));
    }
    if let Some(i) = (total..total + guard).find(|&i| dst[i] != 0xffff) {
        return Err(fail(format!("{kernel}: wrote past the tensor at element {i}")));
    }
    let dump = gpu.download(&dump)?;
    let dims3 = [dims[0], dims[1], if rank == 3 { dims[2] } else { 1 }];
    let row_bytes = bd[0] * 2;
    for b in 0..blocks {
        let (x0, y0, z0) = ((b % bx[0]) * bd[0], (b / bx[0] % bx[1]) * bd[1], b / (bx[0] * bx[1]) * bd[2]);
        for z in 0..bd[2] {
            for y in 0..bd[1] {
                for x in 0..bd[0] {
                    let (gx, gy, gz) = ((x0 + x) as u64, (y0 + y) as u64, (z0 + z) as u64);
                    let want = if gx < dims3[0] && gy < dims3[1] && gz < dims3[2] {
                        src[((gz * dims3[1] + gy) * dims3[0] + gx) as usize]
                    } else {
                        0
                    };
                    let row = z * bd[1] + y;
                    let off = swizzle::tile_offset(row, x, 2, row_bytes, swz == Swizzle::B128);
                    let at = (b * box_bytes + off) as usize;
                    let got = u16::from_le_bytes([dump[at], dump[at + 1]]);
                    if got != want {
                        return Err(fail(format!(
                            "{kernel} ({swz:?}): block {b} shared tile at row {row} col {x} holds {got:#x}, want {want:#x}"
                        )));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Contiguous bulk copies (`cp.async.bulk` both ways), with a generic-proxy store into the shared tile
/// published to the async proxy before the store reads it.
pub fn bulk_1d(gpu: &Gpu, rng: &mut Rng) -> Result<()> {
    let (blocks, bytes) = (8u32, 4096u32);
    let n = (blocks * bytes) as usize;
    let src: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
    let dsrc = gpu.upload(&src)?;
    let mut ddst = gpu.alloc::<u8>(n + 256)?;
    gpu.fill_bytes(&mut ddst, 0xcd)?;
    let s = gpu.stream();
    let p = TmaTest {
        map_src: dptr(&dsrc, s),
        map_dst: dptr(&ddst, s),
        smem_dump: 0,
        box_dims: [0; 3],
        boxes: [blocks, 1, 1],
        box_bytes: bytes,
        pad: 0,
    };
    // SAFETY: matches the kernel; src and dst hold blocks * bytes.
    unsafe { gpu.launch("selftest_bulk_1d", Launch::new(blocks, 128, bytes + 16), &p)? };
    gpu.sync()?;
    let dst = gpu.download(&ddst)?;
    for b in 0..blocks as usize {
        let base = b * bytes as usize;
        let head: Vec<u8> =
            [b as u32, 0xA5A5_0000, 0x5A5A_0000, !(b as u32)].iter().flat_map(|w| w.to_le_bytes()).collect();
        if dst[base..base + 16] != head[..] {
            return Err(fail(format!("selftest_bulk_1d: block {b}'s first 16 bytes lost the generic-proxy store")));
        }
        if let Some(i) = (base + 16..base + bytes as usize).find(|&i| dst[i] != src[i]) {
            return Err(fail(format!("selftest_bulk_1d: byte {i} is {:#x}, source {:#x}", dst[i], src[i])));
        }
    }
    if dst[n..].iter().any(|&v| v != 0xcd) {
        return Err(fail("selftest_bulk_1d: wrote past the destination".into()));
    }
    Ok(())
}

/// mbarrier phases and transaction counts (see the kernel's docs for the expected answers).
pub fn mbarrier_tx(gpu: &Gpu, rng: &mut Rng) -> Result<()> {
    let bytes = 8192u32;
    let src: Vec<u8> = (0..2 * bytes as usize).map(|_| rng.next_u64() as u8).collect();
    let dsrc = gpu.upload(&src)?;
    let mut out = gpu.alloc::<u8>(2 * bytes as usize)?;
    gpu.fill_bytes(&mut out, 0xab)?;
    let mut status = gpu.alloc::<u32>(8)?;
    gpu.fill_bytes(&mut status, 0xff)?;
    let s = gpu.stream();
    let p = MbarrierTest { src: dptr(&dsrc, s), out: dptr(&out, s), status: dptr(&status, s), bytes, pad: 0 };
    // SAFETY: matches the kernel; buffers as sized above.
    unsafe { gpu.launch("selftest_mbarrier_tx", Launch::new(1, 128, 2 * bytes + 16), &p)? };
    gpu.sync()?;
    let st = gpu.download(&status)?;
    if st != [1, 0, 1, 0, 1, 0, 0, 0] {
        return Err(fail(format!("selftest_mbarrier_tx: try_wait answers {st:?}, want [1, 0, 1, 0, 1, 0, 0, 0]")));
    }
    if gpu.download(&out)? != src {
        return Err(fail("selftest_mbarrier_tx: shared memory did not hold the copied bytes".into()));
    }
    Ok(())
}

/// ldmatrix.x4 and stmatrix.x4, plain and .trans, against PTX's fragment rule: lane 4 r + c / 2 holds, in register
/// i, element (r, c) of matrix i (the low half for even c); stored plainly that element lands in row r at position
/// c, with .trans in row c at position r (and ldmatrix .trans reads it back so).
pub fn matrix(gpu: &Gpu, rng: &mut Rng) -> Result<()> {
    let regs: Vec<u32> = (0..128).map(|_| rng.next_u64() as u32).collect();
    let mem: Vec<u8> = (0..512).map(|_| rng.next_u64() as u8).collect();
    let (dregs, dmem) = (gpu.upload(&regs)?, gpu.upload(&mem)?);
    let mut dout = gpu.alloc::<u32>(512)?;
    gpu.fill_bytes(&mut dout, 0xff)?;
    let s = gpu.stream();
    let p = MatrixTest { regs: dptr(&dregs, s), mem: dptr(&dmem, s), out: dptr(&dout, s) };
    // SAFETY: matches the kernel; regs 128 words, mem 512 bytes, out 512 words.
    unsafe { gpu.launch("selftest_matrix", Launch::new(1, 32, 1536), &p)? };
    gpu.sync()?;
    let out = gpu.download(&dout)?;
    let half = |w: u32, h: usize| (w >> (16 * h)) as u16;
    // the fragment's element (matrix i, row r, column c), and the region's u16 at byte offset o
    let frag = |i: usize, r: usize, c: usize| half(regs[4 * (4 * r + c / 2) + i], c % 2);
    let region = |k: usize, o: usize| half(out[128 * k + o / 4], (o % 4) / 2);
    let m = |i: usize, r: usize, c: usize| {
        u16::from_le_bytes([mem[128 * i + 16 * r + 2 * c], mem[128 * i + 16 * r + 2 * c + 1]])
    };
    let loaded = |k: usize, i: usize, r: usize, c: usize| half(out[256 + 128 * k + 4 * (4 * r + c / 2) + i], c % 2);
    for (i, r, c) in (0..4).flat_map(|i| (0..8).flat_map(move |r| (0..8).map(move |c| (i, r, c)))) {
        let checks = [
            ("stmatrix.x4", region(0, 128 * i + 16 * r + 2 * c), frag(i, r, c)),
            ("stmatrix.x4.trans", region(1, 128 * i + 16 * c + 2 * r), frag(i, r, c)),
            ("ldmatrix.x4", loaded(0, i, r, c), m(i, r, c)),
            ("ldmatrix.x4.trans", loaded(1, i, r, c), m(i, c, r)),
        ];
        for (what, got, want) in checks {
            if got != want {
                return Err(fail(format!(
                    "selftest_matrix: {what}, matrix {i} element ({r}, {c}): {got:#x}, want {want:#x}"
                )));
            }
        }
    }
    Ok(())
}

/// Which flag protocol [`flags`] exercises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagMode {
    /// st.release.gpu / ld.acquire.gpu chain.
    ChainGpu = 0,
    /// st.release.sys / ld.acquire.sys chain.
    ChainSys = 1,
    /// red.release.gpu counter, block 0 gathers.
    Counter = 2,
}

/// Acquire/release between the blocks of one launch (grid = the SM count, all resident). With `withhold`,
/// block 0 never releases its flag: block 1 must time out (bounded wait) and report it, and the launch ends.
pub fn flags(gpu: &Gpu, mode: FlagMode, withhold: bool) -> Result<()> {
    let blocks = gpu.sm_count().min(132);
    let words = 1024u32;
    let mut f = gpu.alloc::<u32>(blocks as usize)?;
    gpu.fill_bytes(&mut f, 0)?;
    let mut data = gpu.alloc::<u32>((blocks * words) as usize)?;
    gpu.fill_bytes(&mut data, 0xff)?;
    let mut status = gpu.alloc::<u32>(blocks as usize)?;
    gpu.fill_bytes(&mut status, 0)?;
    let mut counter = gpu.alloc::<u32>(1)?;
    gpu.fill_bytes(&mut counter, 0)?;
    let s = gpu.stream();
    let timeout_ns = if withhold { 20_000_000 } else { 2_000_000_000 };
    let p = FlagTest {
        flags: dptr(&f, s),
        data: dptr(&data, s),
        status: dptr(&status, s),
        counter: dptr(&counter, s),
        words,
        mode: mode as u32 | if withhold { 0x100 } else { 0 },
        timeout_ns,
    };
    // SAFETY: matches the kernel; grid <= SMs with 16 bytes of shared memory each, so every block is resident.
    unsafe { gpu.launch("selftest_flags", Launch::new(blocks, 128, 16), &p)? };
    gpu.sync()?;
    let st = gpu.download(&status)?;
    let d = gpu.download(&data)?;
    let w = words as usize;
    // Every block reports either a timeout (and wrote zeros) or the value its protocol defines. With a withheld
    // flag, block 1 must time out; blocks after it may time out too (they all started waiting at launch).
    if withhold && st[1] != STATUS_TIMEOUT {
        return Err(fail(format!("selftest_flags {mode:?}: block 1 did not time out on the withheld flag")));
    }
    for b in 0..blocks as usize {
        let timed_out = st[b] == STATUS_TIMEOUT;
        if timed_out && !withhold {
            return Err(fail(format!("selftest_flags {mode:?}: block {b} timed out")));
        }
        if st[b] != 0 && !timed_out {
            return Err(fail(format!("selftest_flags {mode:?}: block {b} status {}", st[b])));
        }
        for i in 0..w {
            let want = match mode {
                _ if timed_out => 0,
                FlagMode::ChainGpu | FlagMode::ChainSys if b == 0 => (i + 1) as u32,
                FlagMode::ChainGpu | FlagMode::ChainSys => d[(b - 1) * w + i] + b as u32,
                FlagMode::Counter if b == 0 => {
                    (1..blocks as usize).map(|bb| (bb * w + i) as u32).fold(0, u32::wrapping_add)
                }
                FlagMode::Counter => (b * w + i) as u32,
            };
            if d[b * w + i] != want {
                return Err(fail(format!("selftest_flags {mode:?}: data[{b}][{i}] = {}, want {want}", d[b * w + i])));
            }
        }
    }
    Ok(())
}

/// setmaxnreg in a 3-warpgroup kernel (needs the `.maxntid` build.rs adds).
pub fn setmaxnreg(gpu: &Gpu) -> Result<()> {
    let mut out = gpu.alloc::<u32>(384)?;
    gpu.fill_bytes(&mut out, 0xff)?;
    let p = dptr(&out, gpu.stream());
    // SAFETY: the kernel takes one pointer to 384 u32.
    unsafe { gpu.launch("selftest_setmaxnreg", Launch::new(1, 384, 0), &p)? };
    gpu.sync()?;
    let o = gpu.download(&out)?;
    if let Some(t) = (0..384u32).find(|&t| o[t as usize] != t * 3 + t / 128) {
        return Err(fail(format!("selftest_setmaxnreg: out[{t}] = {}", o[t as usize])));
    }
    Ok(())
}

/// Cycles of the three phases of [`tma_rows`].
#[derive(Clone, Copy, Debug)]
pub struct TmaRowsCycles {
    /// 128 one-row boxes, one issued by each of 128 threads.
    pub rows_by_128_threads: u64,
    /// The same 128 boxes issued by one thread.
    pub rows_by_one_thread: u64,
    /// One 128-row box (contiguous rows).
    pub one_tile_box: u64,
}

/// Row gather by TMA (`selftest_tma_rows`): 128 rows picked at random from a bf16 [4096, 256] matrix, the
/// 64-element segment at column 64 of each, loaded as one-row boxes (128-byte swizzle) at 128-byte steps of a
/// 1024-byte aligned tile, issued by 128 threads and then by one; then rows 0..128 as one 128-row box. Every
/// dump must hold the layout of the 128-byte swizzle (chunk c of tile row t at chunk c ^ (t % 8)) with the
/// picked rows: whether a TMA can gather the A operand of an M-grouped GEMM (or the gathered operand of a weight
/// gradient) row by row. Returns each phase's cycles (issue to completed wait, thread 0's clock).
pub fn tma_rows(gpu: &Gpu, rng: &mut Rng) -> Result<TmaRowsCycles> {
    let (rows, cols, col0) = (4096usize, 256usize, 64usize);
    let src: Vec<u16> = (0..rows * cols).map(|_| (rng.next_u64() as u16) | 1).collect();
    let pick: Vec<u32> = (0..128).map(|_| rng.below(rows) as u32).collect();
    let s = gpu.stream();
    let dsrc = gpu.upload(&src)?;
    let dpick = gpu.upload(&pick)?;
    let a = dptr(&dsrc, s);
    let m_row = DeviceTensorMap::new(
        gpu,
        TiledDesc::row_major_2d(Dtype::Bf16, a, rows as u64, cols as u64, 1, 64, Swizzle::B128),
    )?;
    let m_tile = DeviceTensorMap::new(
        gpu,
        TiledDesc::row_major_2d(Dtype::Bf16, a, rows as u64, cols as u64, 128, 64, Swizzle::B128),
    )?;
    const TILE: usize = 128 * 128;
    let mut dump = gpu.alloc::<u8>(3 * TILE)?;
    gpu.fill_bytes(&mut dump, 0xee)?;
    let mut cycles = gpu.alloc::<u64>(3)?;
    gpu.fill_bytes(&mut cycles, 0)?;
    let p = TmaRowsTest {
        map_row: m_row.ptr(gpu),
        map_tile: m_tile.ptr(gpu),
        rows: dptr(&dpick, s),
        smem_dump: dptr(&dump, s),
        cycles: dptr(&cycles, s),
        col0: col0 as u32,
        pad: 0,
    };
    // SAFETY: matches the kernel's parameter block; the dump holds three tiles, cycles three words; the picked
    // rows are < rows.
    unsafe { gpu.launch("selftest_tma_rows", Launch::new(1, 128, TILE as u32 + 3 * 8), &p)? };
    gpu.sync()?;
    let dump = gpu.download(&dump)?;
    let names = ["one-row boxes by 128 threads", "one-row boxes by one thread", "one 128-row box"];
    for (phase, name) in names.iter().enumerate() {
        for (t, &picked) in pick.iter().enumerate() {
            let src_row = if phase == 2 { t } else { picked as usize };
            for x in 0..64usize {
                let want = src[src_row * cols + col0 + x];
                let off = swizzle::tile_offset(t as u32, x as u32, 2, 128, true) as usize;
                let at = phase * TILE + off;
                let got = u16::from_le_bytes([dump[at], dump[at + 1]]);
                if got != want {
                    return Err(fail(format!(
                        "selftest_tma_rows, {name}: tile row {t} (source row {src_row}) element {x} holds {got:#x}, \
                         want {want:#x}"
                    )));
                }
            }
        }
    }
    let c = gpu.download(&cycles)?;
    Ok(TmaRowsCycles { rows_by_128_threads: c[0], rows_by_one_thread: c[1], one_tile_box: c[2] })
}

/// TMA multicast in 2-CTA clusters (`selftest_tma_mc`, see `TmaMcTest`): `pairs` clusters, `iters` boxes of
/// 128 x 64 bf16 each, loaded per CTA (`multicast` false) or multicast by CTA 0 into both. Both CTAs of a pair
/// must see every byte of their boxes: each block's word sum equals the host's. Under ncu the two modes'
/// `lts__t_sectors_op_read` say whether a multicast is read from L2 once (the launches are otherwise equal).
pub fn tma_multicast(gpu: &Gpu, rng: &mut Rng, pairs: u32, iters: u32, multicast: bool) -> Result<()> {
    let rows = (pairs * iters * 128) as usize;
    let src: Vec<u32> = (0..rows * 32).map(|_| rng.next_u64() as u32).collect();
    let s = gpu.stream();
    let dsrc = gpu.upload(&src)?;
    let map = DeviceTensorMap::new(
        gpu,
        TiledDesc::row_major_2d(Dtype::Bf16, dptr(&dsrc, s), rows as u64, 64, 128, 64, Swizzle::B128),
    )?;
    let blocks = 2 * pairs;
    let mut sums = gpu.alloc::<u32>((blocks * 128) as usize)?;
    gpu.fill_bytes(&mut sums, 0xee)?;
    let p = TmaMcTest { map_src: map.ptr(gpu), sums: dptr(&sums, s), iters, mode: multicast as u32 };
    // SAFETY: matches the kernel's parameter block; the source holds pairs * iters boxes, sums one word per
    // thread; the grid is whole clusters.
    unsafe { gpu.launch("selftest_tma_mc", Launch::new(blocks, 128, 128 * 128 + 16), &p)? };
    gpu.sync()?;
    let got = gpu.download(&sums)?;
    let box_words = 128 * 32;
    for b in 0..blocks as usize {
        let first = (b / 2) * iters as usize * box_words;
        let want = src[first..first + iters as usize * box_words].iter().fold(0u32, |a, &w| a.wrapping_add(w));
        let have = got[b * 128..(b + 1) * 128].iter().fold(0u32, |a, &w| a.wrapping_add(w));
        if have != want {
            return Err(fail(format!(
                "selftest_tma_mc (multicast {multicast}): block {b} (rank {} of pair {}) summed {have:#x}, want \
                 {want:#x}",
                b % 2,
                b / 2
            )));
        }
    }
    Ok(())
}

/// Every self-test once, with one line per test: (name, outcome).
pub fn run_all(gpu: &Gpu, rng: &mut Rng) -> Vec<(String, Result<String>)> {
    let mut r: Vec<(String, Result<String>)> = Vec::new();
    for (n, il) in [(64, false), (128, false), (256, false), (64, true)] {
        let name = format!(
            "wgmma m64n{n}k16 bf16 ({})",
            if il { "interleave, generic-proxy stores" } else { "TMA, 128B swizzle" }
        );
        r.push((name, wgmma(gpu, rng, n, il).map(|e| format!("rel err {e:.2e}"))));
    }
    let ok = |x: Result<()>| x.map(|_| "exact".to_string());
    r.push((
        "TMA 2D round trip, no swizzle".into(),
        ok(tma_round_trip(gpu, rng, &[200, 150], &[64, 32], Swizzle::None)),
    ));
    r.push((
        "TMA 2D round trip, 128B swizzle".into(),
        ok(tma_round_trip(gpu, rng, &[200, 150], &[64, 32], Swizzle::B128)),
    ));
    r.push(("TMA 3D round trip".into(), ok(tma_round_trip(gpu, rng, &[96, 40, 3], &[32, 16, 1], Swizzle::None))));
    r.push(("bulk copy 1D + proxy fence".into(), ok(bulk_1d(gpu, rng))));
    for mc in [false, true] {
        let name = format!("TMA 2D in 2-CTA clusters, {}", if mc { "multicast" } else { "per CTA" });
        r.push((name, ok(tma_multicast(gpu, rng, 66, 16, mc))));
    }
    r.push((
        "TMA row gather (one-row boxes, 128B swizzle)".into(),
        tma_rows(gpu, rng).map(|c| {
            format!(
                "exact; cycles: 128 threads {}, one thread {}, one 128-row box {}",
                c.rows_by_128_threads, c.rows_by_one_thread, c.one_tile_box
            )
        }),
    ));
    r.push(("mbarrier tx counting".into(), ok(mbarrier_tx(gpu, rng))));
    r.push(("ldmatrix / stmatrix x4, plain and .trans".into(), ok(matrix(gpu, rng))));
    for m in [FlagMode::ChainGpu, FlagMode::ChainSys, FlagMode::Counter] {
        r.push((format!("flags {m:?}"), ok(flags(gpu, m, false))));
    }
    r.push(("flags: withheld flag times out".into(), ok(flags(gpu, FlagMode::ChainGpu, true))));
    r.push(("setmaxnreg 3 warpgroups".into(), ok(setmaxnreg(gpu))));
    r
}

/// Descriptor strides tried for MN-major operands by [`wgmma_mn_search`]: (LBO, SBO) in bytes.
pub const MN_CANDIDATES: [(u32, u32); 6] = [(1024, 8192), (8192, 1024), (16, 1024), (1024, 16), (16, 8192), (8192, 16)];

/// wgmma m64n128k16 with B N-major (and A M-major when `trans_a`), 128-byte swizzle, descriptor strides
/// (`lbo`, `sbo`). Returns the relative error against f64.
pub fn wgmma_mn(gpu: &Gpu, rng: &mut Rng, trans_a: bool, lbo: u32, sbo: u32) -> Result<f64> {
    let (m, n, k) = (64usize, 128usize, 64usize);
    let a = rng.bf16_vec(m * k, 1.0); // stored [64, 64]: A[m][k] (K-major) or A[k][m] (M-major)
    let b = rng.bf16_vec(k * n, 1.0); // stored [K, N]
    let (da, db) = (gpu.upload(&a)?, gpu.upload(&b)?);
    let mut dd = gpu.alloc::<f32>(m * n)?;
    gpu.fill_bytes(&mut dd, 0xff)?;
    let s = gpu.stream();
    let map_a =
        DeviceTensorMap::new(gpu, TiledDesc::row_major_2d(Dtype::Bf16, dptr(&da, s), 64, 64, 64, 64, Swizzle::B128))?;
    let map_b =
        DeviceTensorMap::new(gpu, TiledDesc::row_major_2d(Dtype::Bf16, dptr(&db, s), 64, 128, 64, 64, Swizzle::B128))?;
    let p = megamoe_kernels::params::WgmmaMnTest {
        map_a: map_a.ptr(gpu),
        map_b: map_b.ptr(gpu),
        d: dptr(&dd, s),
        trans_a: trans_a as u32,
        lbo,
        sbo,
        pad: 0,
    };
    // SAFETY: matches the kernel; buffers as sized above.
    unsafe { gpu.launch("selftest_wgmma_mn", Launch::new(1, 128, 8192 + 16384 + 16), &p)? };
    gpu.sync()?;
    let d: Vec<f64> = gpu.download(&dd)?.iter().map(|&v| v as f64).collect();
    let at = |mm: usize, kk: usize| if trans_a { a[kk * m + mm] } else { a[mm * k + kk] }.to_f64();
    let mut want = vec![0.0; m * n];
    for mm in 0..m {
        for nn in 0..n {
            want[mm * n + nn] = (0..k).map(|kk| at(mm, kk) * b[kk * n + nn].to_f64()).sum();
        }
    }
    Ok(check::rel_err(&d, &want))
}

/// Every candidate of [`MN_CANDIDATES`] for B N-major (A K-major, then A M-major): (trans_a, lbo, sbo, error).
pub fn wgmma_mn_search(gpu: &Gpu, rng: &mut Rng) -> Result<Vec<(bool, u32, u32, f64)>> {
    let mut r = Vec::new();
    for trans_a in [false, true] {
        for (l, s) in MN_CANDIDATES {
            r.push((trans_a, l, s, wgmma_mn(gpu, rng, trans_a, l, s)?));
        }
    }
    Ok(r)
}

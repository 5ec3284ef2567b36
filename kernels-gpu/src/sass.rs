//! A post-pass on the cubin ptxas writes (sm_90a): chains the operand-reuse flags through long runs of FFMA.
//!
//! The blockwise-FP8 GEMMs promote each 128-deep block's partial product into the f32 accumulator with 64 FFMA
//! a warp in a row (`grouped_gemm_fp8w`'s `promote_half`: acc = part * scale + acc, one scale register for the
//! whole run in the second source slot). ptxas marks only every other FFMA's scale with the reuse flag, so half
//! of them read the scale from the register file beside the partial and the accumulator (a bank conflict where
//! two of the three share a bank), while the tensor cores' accumulators use the same register file. This pass,
//! for the kernels the manifest marks (`KernelSpec::ffma_reuse`), sets the second slot's reuse flag (bit 59 of
//! the instruction's upper word) and the no-yield bit (bit 45, which ptxas sets with every reuse flag: a warp
//! switch would invalidate the operand cache) on each FFMA of a run of at least [`MIN_RUN`] whose next
//! instruction is an FFMA reading the same register in the same slot, which the first does not write; nothing
//! else. The encoding facts were checked against `cuobjdump -sass` of this module: an FFMA with three register
//! sources has 0x223 in bits 0..11 of the lower word (5564 of them), its destination in bits 16..23, its sources
//! in bits 24..31 and 32..39 and bits 0..7 of the upper word, its predicate in bits 12..15 (7: none); every
//! reuse-flagged FFMA has bit 45 set.
//!
//! The reverse (every reuse flag of the runs cleared and switching allowed, as DeepGEMM does to its FP8 kernels'
//! FFMA) was built first and measured slower: 0.95-0.97x, tensor pipe 64% -> 61%, dispatch stalls +33%
//! (docs/RESULTS.md 2026-12-06h call 2).
//!
//! A wrong flag would read a stale operand; the pass sets one only where the register is not written between the
//! two reads and no switch can come between them, and the GEMM's results are compared bitwise with the unpatched
//! kernel's in the tests and the benchmark.
//!
//! Plain code with no dependencies (no allocation), so `build.rs` compiles this file as it is (`#[path]`) and the
//! host tests below check it.

/// Shortest run of consecutive FFMA the pass touches (the promotions' runs are 25-64 long; the few FFMA of
/// address or epilogue arithmetic stay as ptxas scheduled them).
pub const MIN_RUN: usize = 16;

const REUSE_B: u64 = 1 << 59;
const NO_YIELD_BIT: u64 = 1 << 45;

/// What [`reuse_in_ffma_runs`] did to one kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Patched {
    /// Runs of at least [`MIN_RUN`] FFMA found.
    pub runs: usize,
    /// FFMA in those runs.
    pub ffma: usize,
    /// Instructions changed (the second slot's reuse flag and the no-yield bit set).
    pub changed: usize,
}

/// Why the pass refused a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Not a little-endian ELF64 file, or a header or section outside the file.
    NotElf,
    /// No section `.text.<kernel>`.
    NoKernel,
    /// The kernel's code is not a whole number of 16-byte instructions.
    Misaligned,
}

/// Is the instruction whose lower word is `lo` an FFMA with three register sources (any rounding mode)?
pub fn is_ffma_rrr(lo: u64) -> bool {
    lo & 0xfff == 0x223
}

/// The destination and second source registers of an FFMA's lower word (255: RZ), and whether it runs
/// unpredicated.
fn fields(lo: u64) -> (u64, u64, bool) {
    ((lo >> 16) & 0xff, (lo >> 32) & 0xff, (lo >> 12) & 0xf == 7)
}

/// The pass over kernel `kernel`'s code in the ELF image `elf` (a cubin), in place.
pub fn reuse_in_ffma_runs(elf: &mut [u8], kernel: &str) -> Result<Patched, Error> {
    let (off, size) = text_section(elf, kernel)?;
    if size % 16 != 0 {
        return Err(Error::Misaligned);
    }
    Ok(patch_code(&mut elf[off..off + size]))
}

/// The pass over a kernel's code (16-byte instructions).
pub fn patch_code(code: &mut [u8]) -> Patched {
    let n = code.len() / 16;
    let lo = |code: &[u8], i: usize| u64::from_le_bytes(code[16 * i..16 * i + 8].try_into().unwrap());
    let mut done = Patched::default();
    let mut i = 0;
    while i < n {
        if !is_ffma_rrr(lo(code, i)) {
            i += 1;
            continue;
        }
        let start = i;
        while i < n && is_ffma_rrr(lo(code, i)) {
            i += 1;
        }
        if i - start < MIN_RUN {
            continue;
        }
        done.runs += 1;
        done.ffma += i - start;
        for j in start..i - 1 {
            let ((d, b, always), (_, b_next, always_next)) = (fields(lo(code, j)), fields(lo(code, j + 1)));
            let at = 16 * j + 8;
            let hi = u64::from_le_bytes(code[at..at + 8].try_into().unwrap());
            if always && always_next && b == b_next && b != 255 && d != b && hi & REUSE_B == 0 {
                code[at..at + 8].copy_from_slice(&(hi | REUSE_B | NO_YIELD_BIT).to_le_bytes());
                done.changed += 1;
            }
        }
    }
    done
}

/// Byte offset and size of section `.text.<kernel>` of the ELF64 image.
fn text_section(elf: &[u8], kernel: &str) -> Result<(usize, usize), Error> {
    let field = |o: usize, n: usize| -> Result<usize, Error> {
        let b = elf.get(o..o.checked_add(n).ok_or(Error::NotElf)?).ok_or(Error::NotElf)?;
        Ok(b.iter().rev().fold(0usize, |v, &x| v << 8 | x as usize))
    };
    let add = |a: usize, b: usize| a.checked_add(b).ok_or(Error::NotElf);
    if elf.get(0..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1]) {
        return Err(Error::NotElf);
    }
    let (shoff, shentsize, shnum, shstrndx) = (field(0x28, 8)?, field(0x3a, 2)?, field(0x3c, 2)?, field(0x3e, 2)?);
    if shentsize < 64 || shstrndx >= shnum {
        return Err(Error::NotElf);
    }
    let header = |i: usize| add(shoff, i * shentsize);
    let strtab = field(add(header(shstrndx)?, 24)?, 8)?;
    for i in 0..shnum {
        let h = header(i)?;
        let name_at = add(strtab, field(h, 4)?)?;
        let name = elf.get(name_at..).ok_or(Error::NotElf)?;
        let name = &name[..name.iter().position(|&b| b == 0).ok_or(Error::NotElf)?];
        if name.strip_prefix(b".text.") == Some(kernel.as_bytes()) {
            let (off, size) = (field(add(h, 24)?, 8)?, field(add(h, 32)?, 8)?);
            return if add(off, size)? <= elf.len() { Ok((off, size)) } else { Err(Error::NotElf) };
        }
    }
    Err(Error::NoKernel)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    // two instructions of grouped_gemm_fp8w as ptxas wrote them (cuobjdump): `FFMA R209, R24, R4, R209` and
    // `FFMA R208, R25, R4.reuse, R208`, and a non-FFMA (`WARPGROUP.ARRIVE`-like filler with reuse bits set)
    const PLAIN: (u64, u64) = (0x0000_0004_18d1_7223, 0x000f_c200_0000_00d1);
    const REUSED: (u64, u64) = (0x0000_0004_19d0_7223, 0x080f_e200_0000_00d0);
    const OTHER: (u64, u64) = (0x0000_0000_0000_79c8, 0x080f_e200_0000_0000);

    fn code(ins: &[(u64, u64)]) -> Vec<u8> {
        ins.iter().flat_map(|&(lo, hi)| lo.to_le_bytes().into_iter().chain(hi.to_le_bytes())).collect()
    }

    fn words(code: &[u8]) -> Vec<(u64, u64)> {
        code.chunks(16)
            .map(|c| (u64::from_le_bytes(c[..8].try_into().unwrap()), u64::from_le_bytes(c[8..].try_into().unwrap())))
            .collect()
    }

    #[test]
    fn a_long_run_reuses_its_scale_through_to_its_last_ffma() {
        let mut ins = std::vec![OTHER];
        for _ in 0..MIN_RUN / 2 {
            ins.extend([PLAIN, REUSED]);
        }
        ins.push(OTHER);
        let mut c = code(&ins);
        let done = patch_code(&mut c);
        assert_eq!(done, Patched { runs: 1, ffma: MIN_RUN, changed: MIN_RUN / 2 });
        let out = words(&c);
        assert_eq!(out[0], OTHER);
        assert_eq!(out[ins.len() - 1], OTHER);
        for (j, (&(lo, hi), &(lo0, hi0))) in out.iter().zip(&ins).enumerate().skip(1).take(MIN_RUN) {
            assert_eq!(lo, lo0, "instruction {j}: the lower word is never touched");
            if hi0 & REUSE_B == 0 {
                assert_eq!(hi, hi0 | REUSE_B | NO_YIELD_BIT, "instruction {j}");
                assert_eq!(hi, 0x080f_e200_0000_00d1, "as ptxas encodes the same FFMA with R4.reuse");
            } else {
                assert_eq!(hi, hi0, "instruction {j}: already flagged, unchanged");
            }
        }
    }

    #[test]
    fn no_flag_where_the_next_read_differs_or_the_register_is_written() {
        // R4 written by the first (its destination), another register in the next one's slot, a predicated FFMA
        let writes_r4 = (0x0000_0004_1804_7223, PLAIN.1);
        let other_b = (0x0000_0005_18d1_7223, PLAIN.1);
        let predicated = (PLAIN.0 & !0xf000, PLAIN.1);
        let mut ins = std::vec![PLAIN; MIN_RUN];
        ins[3] = writes_r4;
        ins[7] = other_b;
        ins[11] = predicated;
        let mut c = code(&ins);
        let done = patch_code(&mut c);
        // flagged: every FFMA but the last, those three and the ones before the other register and the predicated
        assert_eq!(done.changed, MIN_RUN - 1 - 5);
        let out = words(&c);
        for j in [3, 6, 7, 10, 11, MIN_RUN - 1] {
            assert_eq!(out[j], ins[j], "instruction {j}");
        }
    }

    #[test]
    fn short_runs_and_other_instructions_stay() {
        let mut ins = Vec::new();
        for _ in 0..3 {
            for _ in 0..(MIN_RUN - 1) / 2 {
                ins.extend([PLAIN, REUSED]);
            }
            ins.push(OTHER);
        }
        let mut c = code(&ins);
        assert_eq!(patch_code(&mut c), Patched::default());
        assert_eq!(words(&c), ins);
    }

    /// A minimal ELF64 image: null section, the string table, `.text.k` holding `text`.
    fn elf(text: &[u8]) -> Vec<u8> {
        let names = b"\0.shstrtab\0.text.k\0";
        let (names_at, text_at) = (64usize, 128usize);
        let shoff = text_at + text.len();
        let mut f = std::vec![0u8; shoff + 3 * 64];
        f[..6].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1]);
        f[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        f[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        f[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        f[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
        f[names_at..names_at + names.len()].copy_from_slice(names);
        f[text_at..text_at + text.len()].copy_from_slice(text);
        let mut section = |i: usize, name: u32, off: usize, size: usize| {
            let h = shoff + 64 * i;
            f[h..h + 4].copy_from_slice(&name.to_le_bytes());
            f[h + 24..h + 32].copy_from_slice(&(off as u64).to_le_bytes());
            f[h + 32..h + 40].copy_from_slice(&(size as u64).to_le_bytes());
        };
        section(1, 1, names_at, names.len());
        section(2, 11, text_at, text.len());
        f
    }

    #[test]
    fn the_kernel_is_found_by_its_section_and_only_it_changes() {
        let run: Vec<_> = (0..MIN_RUN).map(|j| if j % 2 == 0 { PLAIN } else { REUSED }).collect();
        let mut f = elf(&code(&run));
        let before = f.clone();
        assert_eq!(reuse_in_ffma_runs(&mut f, "kx"), Err(Error::NoKernel));
        assert_eq!(reuse_in_ffma_runs(&mut f, "k").map(|p| p.changed), Ok(MIN_RUN / 2));
        let changed: Vec<usize> = (0..f.len()).filter(|&i| f[i] != before[i]).collect();
        assert!(changed.iter().all(|&i| (128..128 + 16 * MIN_RUN).contains(&i) && i % 16 >= 8));
        // a second pass finds nothing left to change
        assert_eq!(reuse_in_ffma_runs(&mut f, "k").map(|p| p.changed), Ok(0));
    }

    #[test]
    fn damaged_files_are_refused() {
        let mut f = elf(&code(&[PLAIN]));
        let good = f.clone();
        f[4] = 1; // ELF32
        assert_eq!(reuse_in_ffma_runs(&mut f, "k"), Err(Error::NotElf));
        let mut f = good.clone();
        f[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes()); // section headers past the end
        assert_eq!(reuse_in_ffma_runs(&mut f, "k"), Err(Error::NotElf));
        let mut f = good.clone();
        let size_at = f.len() - 64 + 32; // .text.k's size: past the file's end, then not a whole instruction
        let size = u64::from_le_bytes(f[size_at..size_at + 8].try_into().unwrap());
        f[size_at..size_at + 8].copy_from_slice(&(size + 10_000).to_le_bytes());
        assert_eq!(reuse_in_ffma_runs(&mut f, "k"), Err(Error::NotElf));
        let mut f = good;
        f[size_at..size_at + 8].copy_from_slice(&(size - 8).to_le_bytes());
        assert_eq!(reuse_in_ffma_runs(&mut f, "k"), Err(Error::Misaligned));
        assert_eq!(reuse_in_ffma_runs(&mut [0u8; 3], "k"), Err(Error::NotElf));
    }
}

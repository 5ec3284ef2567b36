//! Shared-memory matrix descriptors for `wgmma` (the 64-bit "matrix descriptor" of the PTX ISA, sm_90).
//!
//! Bit fields: start address >> 4 in bits 0..14, leading-dimension byte offset >> 4 in bits 16..30,
//! stride-dimension byte offset >> 4 in bits 32..46, base offset in bits 49..52, layout type in bits 62..64
//! (0 = no swizzle / interleaved core matrices, 1 = 128-byte swizzle, 2 = 64-byte, 3 = 32-byte).

/// How a K-major operand tile is laid out in shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Layout {
    /// 8x16-byte core matrices; LBO = byte distance between core matrices along K, SBO = along M/N.
    Interleave = 0,
    /// Rows of 128 bytes, 16-byte chunk c of row r stored at chunk c ^ (r % 8); 8-row atoms of 1024 bytes.
    Swizzle128B = 1,
    /// Rows of 64 bytes (chunk c of row r at c ^ ((r / 2) % 4)).
    Swizzle64B = 2,
    /// Rows of 32 bytes.
    Swizzle32B = 3,
}

/// A wgmma shared-memory matrix descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub struct SmemDesc(pub u64);

impl SmemDesc {
    /// Largest shared-memory address a descriptor can hold (14 bits of 16-byte units).
    pub const MAX_ADDR: u32 = (1 << 18) - 16;

    /// Build a descriptor. `addr`, `lbo` and `sbo` are byte values, multiples of 16 below 2^18.
    #[inline(always)]
    pub const fn new(addr: u32, lbo: u32, sbo: u32, layout: Layout) -> Self {
        let a = ((addr as u64) >> 4) & 0x3fff;
        let l = ((lbo as u64) >> 4) & 0x3fff;
        let s = ((sbo as u64) >> 4) & 0x3fff;
        SmemDesc(a | (l << 16) | (s << 32) | ((layout as u64) << 62))
    }

    /// K-major operand with 128-byte swizzle (a row of 64 bf16 = 128 bytes, atoms of 8 rows): SBO = 1024 bytes
    /// between 8-row groups; LBO is unused for this layout (set to 16 bytes, i.e. encoded 1).
    #[inline(always)]
    pub const fn k_major_sw128(addr: u32) -> Self {
        Self::new(addr, 16, 1024, Layout::Swizzle128B)
    }

    /// The same descriptor with its start address moved by `bytes` (a K step inside a swizzle atom is +32 B
    /// per 16 bf16).
    #[inline(always)]
    pub const fn advance(self, bytes: u32) -> Self {
        SmemDesc(self.0 + ((bytes as u64) >> 4))
    }

    /// Start address in bytes.
    pub const fn addr(self) -> u32 {
        ((self.0 & 0x3fff) << 4) as u32
    }
    /// Leading-dimension byte offset.
    pub const fn lbo(self) -> u32 {
        (((self.0 >> 16) & 0x3fff) << 4) as u32
    }
    /// Stride-dimension byte offset.
    pub const fn sbo(self) -> u32 {
        (((self.0 >> 32) & 0x3fff) << 4) as u32
    }
    /// Layout type field.
    pub const fn layout(self) -> u8 {
        (self.0 >> 62) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let d = SmemDesc::new(0x1_2340, 128, 256, Layout::Interleave);
        assert_eq!(d.addr(), 0x1_2340);
        assert_eq!(d.lbo(), 128);
        assert_eq!(d.sbo(), 256);
        assert_eq!(d.layout(), 0);
    }

    #[test]
    fn sw128_matches_the_verified_encoding() {
        // TOOLCHAIN.md: (addr >> 4) | (1 << 16) | ((1024 >> 4) << 32) | (1 << 62) ran correctly on the H200.
        let addr = 0x4400;
        let want = ((addr as u64) >> 4) | (1 << 16) | ((1024u64 >> 4) << 32) | (1 << 62);
        assert_eq!(SmemDesc::k_major_sw128(addr).0, want);
    }

    #[test]
    fn advance_moves_only_the_address() {
        let d = SmemDesc::k_major_sw128(0x8000);
        let e = d.advance(32).advance(32);
        assert_eq!(e.addr(), 0x8040);
        assert_eq!((e.lbo(), e.sbo(), e.layout()), (d.lbo(), d.sbo(), d.layout()));
    }

    #[test]
    fn address_field_is_14_bits_of_16_byte_units() {
        let d = SmemDesc::new(SmemDesc::MAX_ADDR, 16, 16, Layout::Swizzle128B);
        assert_eq!(d.addr(), SmemDesc::MAX_ADDR);
        assert_eq!(d.0 >> 14 & 0x3, 0, "bits 14..16 stay clear");
    }
}

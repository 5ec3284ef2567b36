//! Tensor maps for the copy engine, encoded with `cuTensorMapEncodeTiled` and placed in device memory.
//!
//! Rust cannot pass a 64-byte-aligned `CUtensorMap` by value to a kernel (TOOLCHAIN.md, Pitfalls), so every map
//! lives in a 128-byte device buffer and the kernel receives its address.
use cudarc::driver::sys::{
    self, CUtensorMapDataType, CUtensorMapFloatOOBfill, CUtensorMapInterleave, CUtensorMapL2promotion,
    CUtensorMapSwizzle,
};
use cudarc::driver::CudaSlice;

use crate::error::{Context, Error, Result};
use crate::runtime::{dptr, Gpu};

/// Element type of a tensor map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// bf16.
    Bf16,
    /// f32.
    F32,
    /// bytes.
    U8,
}

impl Dtype {
    /// Bytes per element.
    pub const fn size(self) -> u64 {
        match self {
            Dtype::Bf16 => 2,
            Dtype::F32 => 4,
            Dtype::U8 => 1,
        }
    }
    fn cu(self) -> CUtensorMapDataType {
        match self {
            Dtype::Bf16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            Dtype::F32 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
            Dtype::U8 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        }
    }
}

/// Shared-memory swizzle of the boxes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Swizzle {
    /// Rows as they are.
    None,
    /// 128-byte swizzle: the inner box extent must be 128 bytes at most, the shared tile 1024-byte aligned.
    B128,
}

/// What to encode: a row-major tensor of `dims` (innermost first) with `strides` in bytes for dims 1.., read
/// in boxes of `box_dims` elements.
#[derive(Clone, Debug)]
pub struct TiledDesc {
    /// Element type.
    pub dtype: Dtype,
    /// Global address (16-byte aligned).
    pub addr: u64,
    /// Extents, innermost first (1 to 5 dimensions).
    pub dims: Vec<u64>,
    /// Byte strides of dimensions 1.. (multiples of 16).
    pub strides: Vec<u64>,
    /// Box extents in elements (each 1..=256).
    pub box_dims: Vec<u32>,
    /// Swizzle.
    pub swizzle: Swizzle,
}

impl TiledDesc {
    /// A row-major 2D tensor of `rows` x `cols` elements, boxes of `box_rows` x `box_cols`.
    pub fn row_major_2d(
        dtype: Dtype,
        addr: u64,
        rows: u64,
        cols: u64,
        box_rows: u32,
        box_cols: u32,
        swizzle: Swizzle,
    ) -> Self {
        TiledDesc {
            dtype,
            addr,
            dims: vec![cols, rows],
            strides: vec![cols * dtype.size()],
            box_dims: vec![box_cols, box_rows],
            swizzle,
        }
    }

    /// Bytes of one box in shared memory.
    pub fn box_bytes(&self) -> u64 {
        self.box_dims.iter().map(|&b| b as u64).product::<u64>() * self.dtype.size()
    }

    /// The checks the driver would make, with reasons.
    pub fn validate(&self) -> Result<()> {
        let bad = |s: String| Err(Error::InvalidArgument(format!("tensor map: {s}")));
        let r = self.dims.len();
        if !(1..=5).contains(&r) || self.strides.len() + 1 != r || self.box_dims.len() != r {
            return bad(format!("rank {r} with {} strides and {} box dims", self.strides.len(), self.box_dims.len()));
        }
        if self.addr % 16 != 0 {
            return bad(format!("address {:#x} is not 16-byte aligned", self.addr));
        }
        if let Some(d) = self.dims.iter().find(|&&d| d == 0 || d > (1 << 32)) {
            return bad(format!("extent {d} outside 1..=2^32"));
        }
        if let Some(s) = self.strides.iter().find(|&&s| s % 16 != 0 || s >= (1 << 40)) {
            return bad(format!("stride {s} bytes is not a multiple of 16 below 2^40"));
        }
        if let Some(b) = self.box_dims.iter().find(|&&b| b == 0 || b > 256) {
            return bad(format!("box extent {b} outside 1..=256"));
        }
        let inner = self.box_dims[0] as u64 * self.dtype.size();
        if inner % 16 != 0 {
            return bad(format!("inner box extent of {inner} bytes is not a multiple of 16"));
        }
        if self.swizzle == Swizzle::B128 && inner > 128 {
            return bad(format!("inner box extent of {inner} bytes > 128 with 128-byte swizzle"));
        }
        Ok(())
    }
}

/// The 128 bytes of the map `desc` describes (`cuTensorMapEncodeTiled`, a host computation: legal during a CUDA
/// graph capture). `gpu`'s context is made current.
pub fn encode(gpu: &Gpu, desc: &TiledDesc) -> Result<[u8; 128]> {
    desc.validate()?;
    let r = desc.dims.len();
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    let elem_strides = vec![1u32; r];
    let swz = match desc.swizzle {
        Swizzle::None => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
        Swizzle::B128 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    gpu.context().bind_to_thread().ctx(|| "binding the context".into())?;
    // SAFETY: every array has the rank's length; the map is written by the driver only.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            desc.dtype.cu(),
            r as u32,
            desc.addr as *mut std::ffi::c_void,
            desc.dims.as_ptr(),
            desc.strides.as_ptr(),
            desc.box_dims.as_ptr(),
            elem_strides.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swz,
            CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
        .result()
    }
    .ctx(|| format!("cuTensorMapEncodeTiled({desc:?})"))?;
    let mut bytes = [0u8; 128];
    for (c, w) in bytes.chunks_exact_mut(8).zip(map.opaque.iter()) {
        c.copy_from_slice(&w.to_le_bytes());
    }
    Ok(bytes)
}

/// A tensor map in device memory.
pub struct DeviceTensorMap {
    buf: CudaSlice<u8>,
    desc: TiledDesc,
}

impl DeviceTensorMap {
    /// Encode `desc` and copy the map into device memory on `gpu`.
    pub fn new(gpu: &Gpu, desc: TiledDesc) -> Result<Self> {
        let bytes = encode(gpu, &desc)?;
        let buf = gpu.upload(&bytes)?;
        Ok(DeviceTensorMap { buf, desc })
    }

    /// Device address of the 128-byte map (what kernels take).
    pub fn ptr(&self, gpu: &Gpu) -> u64 {
        dptr(&self.buf, gpu.stream())
    }

    /// What was encoded.
    pub fn desc(&self) -> &TiledDesc {
        &self.desc
    }
}

/// Tensor maps for buffers first seen during a CUDA graph capture. A capture can record neither an allocation
/// nor a copy from pageable memory, which is how [`DeviceTensorMap::new`] places a map; it can record a copy
/// from page-locked memory, which reads its source at every replay. So this holds `SLOTS` device slots of 128
/// bytes, allocated before any capture, and as many page-locked host slots: [`CaptureMaps::put`] encodes a map
/// into the next host slot and [`CaptureMaps::copy`] queues its copy into the device slot on the stream (in a
/// capture, a copy node that rewrites the map at every replay, ordered before the launches that read it, as an
/// eager upload is). A slot is never reused: a graph keeps reading its host slot.
pub struct CaptureMaps {
    dev: CudaSlice<u8>,
    host: PinnedBytes,
    used: usize,
    stream: std::sync::Arc<cudarc::driver::CudaStream>,
}

impl Drop for CaptureMaps {
    fn drop(&mut self) {
        // copies from the host slots may still be queued, eagerly on the layer's stream or by a graph's replay on
        // any stream: wait for the context's work before the host memory goes (only a layer that ever placed such
        // a map waits; a graph replayed after its layer is gone is the caller's error, as documented)
        if self.used > 0 {
            let _ = self.stream.context().synchronize();
        }
    }
}

/// Page-locked host bytes (`cuMemHostAlloc`), freed on drop.
struct PinnedBytes {
    ptr: *mut u8,
}

// SAFETY: plain host memory owned by this value; only `&mut self` writes it.
unsafe impl Send for PinnedBytes {}
// SAFETY: as above; `&self` gives no access to the bytes.
unsafe impl Sync for PinnedBytes {}

impl Drop for PinnedBytes {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `malloc_host` and is freed once, after the copies that read it (the owner's
        // drop waits for its stream).
        unsafe {
            let _ = cudarc::driver::result::free_host(self.ptr as *mut std::ffi::c_void);
        }
    }
}

impl CaptureMaps {
    /// Slots for maps first encoded during a capture (a layer's whole forward and backward use about a dozen).
    pub const SLOTS: usize = 128;

    /// [`CaptureMaps::SLOTS`] slots on `gpu` (not during a capture).
    pub fn new(gpu: &Gpu) -> Result<Self> {
        let len = Self::SLOTS * 128;
        let mut dev = gpu.alloc::<u8>(len)?;
        gpu.fill_bytes(&mut dev, 0)?;
        gpu.context().bind_to_thread().ctx(|| "binding the context".into())?;
        // SAFETY: a fresh allocation of `len` bytes, zeroed below before any use.
        let ptr = unsafe { cudarc::driver::result::malloc_host(len, 0) }
            .ctx(|| format!("allocating {len} bytes of page-locked host memory"))? as *mut u8;
        // SAFETY: `ptr` holds `len` bytes.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Ok(CaptureMaps { dev, host: PinnedBytes { ptr }, used: 0, stream: gpu.stream().clone() })
    }

    /// Slots still free.
    pub fn free_slots(&self) -> usize {
        Self::SLOTS - self.used
    }

    /// Encode `desc` into the next free slot's host bytes: the slot, whose device bytes [`CaptureMaps::copy`]
    /// writes. An error when the slots are used up (nothing changes then).
    pub fn put(&mut self, gpu: &Gpu, desc: &TiledDesc) -> Result<usize> {
        if self.used == Self::SLOTS {
            return Err(Error::InvalidArgument(format!(
                "more than {} tensor maps of buffers new to this layer were made during CUDA graph captures: run \
                 the captured calls once outside the capture first, with the same buffers",
                Self::SLOTS
            )));
        }
        let bytes = encode(gpu, desc)?;
        let slot = self.used;
        // SAFETY: slot `used` lies inside the host allocation (`SLOTS` slots of 128 bytes); no copy has read it
        // yet (slots are never reused).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.host.ptr.add(slot * 128), 128) };
        self.used += 1;
        Ok(slot)
    }

    /// Queue the copy of `slot`'s host bytes into its device slot on `gpu`'s stream (in a capture, a copy node
    /// that runs at each replay; outside one, it runs once in stream order).
    pub fn copy(&self, gpu: &Gpu, slot: usize) -> Result<()> {
        assert!(slot < self.used, "slot {slot} was never filled");
        // SAFETY: the slot's 128 bytes lie inside the page-locked allocation, which lives as long as `self`.
        let src = unsafe { std::slice::from_raw_parts(self.host.ptr.add(slot * 128), 128) };
        // SAFETY: the destination is the slot's 128 bytes of `dev`; the source is page-locked (a capture records
        // its address and reads it at every replay: the layer that owns `self` must outlive its graphs).
        unsafe { cudarc::driver::result::memcpy_htod_async(self.addr(gpu, slot), src, gpu.stream().cu_stream()) }
            .ctx(|| "queueing a tensor map's copy from page-locked memory".into())
    }

    /// Device address of `slot`'s map.
    pub fn addr(&self, gpu: &Gpu, slot: usize) -> u64 {
        dptr(&self.dev, gpu.stream()) + (slot * 128) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d2(cols: u64, box_cols: u32, swz: Swizzle) -> TiledDesc {
        TiledDesc::row_major_2d(Dtype::Bf16, 0x1000, 100, cols, 64, box_cols, swz)
    }

    #[test]
    fn accepts_the_gemm_tiles() {
        d2(2048, 64, Swizzle::B128).validate().unwrap();
        d2(2048, 256, Swizzle::None).validate().unwrap();
        assert_eq!(d2(2048, 64, Swizzle::B128).box_bytes(), 64 * 64 * 2);
    }

    #[test]
    fn rejects_with_reasons() {
        let e = d2(2048, 128, Swizzle::B128).validate().unwrap_err().to_string();
        assert!(e.contains("128-byte swizzle"), "{e}");
        let e = d2(2047, 64, Swizzle::None).validate().unwrap_err().to_string();
        assert!(e.contains("multiple of 16"), "{e}");
        let mut d = d2(2048, 64, Swizzle::None);
        d.addr = 0x1008;
        assert!(d.validate().unwrap_err().to_string().contains("aligned"));
        let mut d = d2(2048, 64, Swizzle::None);
        d.box_dims[1] = 300;
        assert!(d.validate().unwrap_err().to_string().contains("box extent"));
    }
}

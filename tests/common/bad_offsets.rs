//! Device offsets not as promised, for the tests that every grouped call stays inside its buffers whatever the
//! device `offsets` / `tile_offsets` hold (tests/grouped_gemm.rs for the bf16 calls, tests/fp8.rs for the FP8
//! ones): the bad layouts, buffers with a poisoned guard zone after them, and a deadline on the launches.
use megamoe::gemm;
use megamoe::rng::Rng;
use megamoe::Gpu;

/// Elements of each guard zone.
pub const GUARD: usize = 1 << 16;

/// A device buffer of `len` elements at the front of one allocation of `len + GUARD`, every byte of it set to `byte`
/// (`buf`: a `CudaSlice` over the first `len` elements, what a call is given; the guard zone after them is checked
/// with [`Guarded::guard_intact`]).
pub struct Guarded<T: cudarc::driver::DeviceRepr> {
    whole: cudarc::driver::CudaSlice<T>,
    view: Option<cudarc::driver::CudaSlice<T>>,
    len: usize,
}

impl<T: cudarc::driver::DeviceRepr + bytemuck::Pod + Default> Guarded<T> {
    pub fn new(g: &Gpu, len: usize, byte: u8) -> Self {
        use cudarc::driver::DevicePtr;
        let mut whole = g.alloc::<T>(len + GUARD).unwrap();
        g.fill_bytes(&mut whole, byte).unwrap();
        let ptr = {
            let (p, _sync) = whole.device_ptr(g.stream());
            p
        };
        // SAFETY: the first `len` elements of `whole`, which outlives the view; the view is leaked (never freed)
        // before `whole` is dropped
        let view = unsafe { g.stream().upgrade_device_ptr::<T>(ptr, len) };
        Guarded { whole, view: Some(view), len }
    }

    /// `data` in the front, the guard zone of `byte`.
    pub fn with(g: &Gpu, data: &[T], byte: u8) -> Self {
        let mut b = Self::new(g, data.len(), byte);
        g.write(b.buf(), data).unwrap();
        b
    }

    /// A copy of device buffer `src` in the front, the guard zone of `byte` (e.g. 0xff: NaN in bf16, f32 and e4m3,
    /// so a read past `src` shows in what it feeds).
    pub fn copy_of(g: &Gpu, src: &cudarc::driver::CudaSlice<T>, byte: u8) -> Self {
        Self::with(g, &g.download(src).unwrap(), byte)
    }

    /// Zeroes in the front (the guard zone keeps its byte): an output whose every element must then be finite.
    pub fn zero_front(&mut self, g: &Gpu) {
        g.fill_bytes(self.buf(), 0).unwrap();
    }

    /// The front's elements, on the host.
    pub fn front_host(&self, g: &Gpu) -> Vec<T> {
        g.download(self.front()).unwrap()
    }

    pub fn buf(&mut self) -> &mut cudarc::driver::CudaSlice<T> {
        self.view.as_mut().unwrap()
    }

    pub fn front(&self) -> &cudarc::driver::CudaSlice<T> {
        self.view.as_ref().unwrap()
    }

    /// Whether every byte after the front is still `byte`.
    pub fn guard_intact(&self, g: &Gpu, byte: u8) -> bool {
        let host = g.download(&self.whole).unwrap();
        bytemuck::cast_slice::<T, u8>(&host[self.len..]).iter().all(|&b| b == byte)
    }
}

impl<T: cudarc::driver::DeviceRepr> Drop for Guarded<T> {
    fn drop(&mut self) {
        if let Some(v) = self.view.take() {
            v.leak();
        }
    }
}

/// Wait for everything enqueued on `g`'s stream, at most `DEADLINE_S` seconds: a launch still running then has an
/// unbounded (or effectively unbounded) walk. A hung kernel would hold up every later test of the binary, so the
/// process exits with the message; a launch error is a panic.
pub fn finishes(g: &Gpu, what: &str) {
    const DEADLINE_S: f64 = 5.0;
    let ev = g.stream().record_event(None).unwrap();
    let t0 = std::time::Instant::now();
    loop {
        match ev.try_is_complete() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => panic!("{what}: the launch failed: {e:?}"),
        }
        if t0.elapsed().as_secs_f64() > DEADLINE_S {
            eprintln!("{what}: still running after {DEADLINE_S} s (an unbounded walk); exiting");
            std::process::exit(101);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    g.sync().unwrap();
}

/// Experts of the bad layouts.
pub const BAD_E: usize = 6;

/// Named (offsets, tile_offsets) pairs of `BAD_E` experts that break the promise for buffers of `rows_max` rows
/// (rows_max >= 200): rows past rows_max (the counts' offsets and their consistent tile offsets, and offsets near
/// 2^32 where row * ldc wraps), decreasing offsets, a huge tile count (u32::MAX, and counts whose product with the
/// column tiles wraps: to 0, and to a few tiles or 2^31 + 2), garbage tile offsets, and random words.
pub fn bad_layouts(rows_max: u32, r: &mut Rng) -> Vec<(&'static str, Vec<u32>, Vec<u32>)> {
    let prefix = |v: &[u32]| -> Vec<u32> {
        let mut o = vec![0u32];
        for &x in v {
            o.push(o.last().unwrap().wrapping_add(x));
        }
        o
    };
    let past = [0u32, 1, rows_max + 100, 129, 0, 17];
    let fits = [0u32, 1, rows_max / 2, 29, 0, 17];
    let m = u32::MAX;
    let mut words = || (0..=BAD_E).map(|_| r.next_u64() as u32).collect::<Vec<u32>>();
    vec![
        ("offsets past rows_max", prefix(&past), gemm::tile_offsets(&past)),
        ("offsets near 2^32", vec![0, 10, 3_000_000_000, 4_000_000_000, m - 7, m, m], vec![0, 1, 2, 3, 4, 5, 6]),
        ("decreasing offsets", vec![0, rows_max - 50, 20, rows_max - 10, 5, 100, 60], vec![0, 2, 3, 4, 5, 6, 7]),
        ("offsets[E] below offsets[0]", vec![rows_max, rows_max, rows_max, 7, 7, 7, 0], vec![0, 0, 0, 1, 1, 1, 2]),
        ("tile_offsets[E] = 2^32 - 1", prefix(&fits), {
            let mut t = gemm::tile_offsets(&fits);
            t[BAD_E] = m;
            t
        }),
        ("tile_offsets[E] wrapping with the column tiles", prefix(&fits), {
            let mut t = gemm::tile_offsets(&fits);
            t[BAD_E] = 1 << 31;
            t
        }),
        ("tile_offsets[E] wrapping to a few tiles", prefix(&fits), {
            // times 4 column tiles 2^32 + 4 (wraps to 4), times 2 2^31 + 2: unbounded without the walk's bound
            let mut t = gemm::tile_offsets(&fits);
            t[BAD_E] = (1 << 30) + 1;
            t
        }),
        ("garbage tile_offsets", prefix(&fits), vec![9, 3, m, 0, 4_000_000_000, 1, 70_000]),
        ("random words", words(), words()),
    ]
}

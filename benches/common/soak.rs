//! `MEGAMOE_SOAK=S`: S seconds of one operation back to back, for the GPU's power and clock samples taken beside
//! the run (nvidia-smi every 100 ms, matched by wall-clock time): the sustained rate a training loop sees under the
//! 700 W cap, and the energy each launch takes. Shared by the layer and GEMM benches.

/// The soak's seconds (`MEGAMOE_SOAK`, positive), or `None`: no soak.
pub fn seconds() -> Option<f64> {
    std::env::var("MEGAMOE_SOAK").ok().and_then(|v| v.parse().ok()).filter(|&s: &f64| s > 0.0)
}

/// Seconds since the Unix epoch (the clock nvidia-smi's samples are matched against).
pub fn unix_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Runs `chunk` (which launches `per_chunk` operations and returns their device time in ms) until `secs` seconds
/// of wall-clock time have passed: (operations, microseconds each by the device's events, start, end in unix s).
pub fn run<E>(
    secs: f64,
    per_chunk: usize,
    mut chunk: impl FnMut() -> Result<f64, E>,
) -> Result<(usize, f64, f64, f64), E> {
    let t0 = unix_s();
    let (mut n, mut ms) = (0usize, 0.0);
    while unix_s() - t0 < secs {
        ms += chunk()?;
        n += per_chunk;
    }
    Ok((n, ms * 1e3 / n.max(1) as f64, t0, unix_s()))
}

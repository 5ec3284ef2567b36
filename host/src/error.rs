//! The one error type of megamoe.
use cudarc::driver::DriverError;

/// Every way a megamoe call can fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No CUDA driver library (libcuda) could be loaded: this machine has no NVIDIA driver.
    #[error("no CUDA driver found (libcuda could not be loaded): this machine has no usable NVIDIA GPU")]
    NoDriver,
    /// The driver loaded but reports no device (or the requested ordinal does not exist).
    #[error("no CUDA device {ordinal} (the driver reports {count})")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// Devices the driver reports.
        count: usize,
    },
    /// The device is not one the kernels are built for (sm_90a: H100 / H200).
    #[error("device {ordinal} ({name}) has compute capability {major}.{minor}; megamoe's kernels need 9.0 (Hopper)")]
    UnsupportedDevice {
        /// Device ordinal.
        ordinal: usize,
        /// Device name.
        name: String,
        /// Compute capability, major.
        major: i32,
        /// Compute capability, minor.
        minor: i32,
    },
    /// A CUDA driver call failed.
    #[error("CUDA error in {what}: {source}")]
    Driver {
        /// What was being done.
        what: String,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// An argument was rejected before anything was launched or written.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A kernel's launch configuration breaks its own or the device's limits.
    #[error("invalid launch of {kernel}: {why}")]
    InvalidLaunch {
        /// Kernel name.
        kernel: &'static str,
        /// Why.
        why: String,
    },
    /// The module does not export the kernel.
    #[error("kernel `{0}` is not in the embedded module")]
    MissingKernel(String),
    /// A result differs from its reference (self-tests, checked runs).
    #[error("check failed: {0}")]
    Mismatch(String),
    /// A bounded wait on the device expired.
    #[error("timed out after {timeout_ms} ms waiting for rank {rank} in phase `{phase}`")]
    Timeout {
        /// The rank that did not arrive.
        rank: usize,
        /// The phase of the layer.
        phase: &'static str,
        /// The bound that expired.
        timeout_ms: u64,
    },
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Attach a description of the call to a driver error.
pub trait Context<T> {
    /// Map a `DriverError` into [`Error::Driver`] naming `what`.
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for std::result::Result<T, DriverError> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Driver { what: what(), source })
    }
}

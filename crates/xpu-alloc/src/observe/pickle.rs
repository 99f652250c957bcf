//! A [`MemorySnapshot`] as the pickle file PyTorch's memory visualizer
//! (`torch/cuda/_memory_viz.py`, pytorch.org/memory_viz) opens: a dict with `segments`,
//! `device_traces` and `allocator_settings`, written with `serde-pickle` (protocol 3).

use std::io::Write;
use std::path::Path;

use super::snapshot::MemorySnapshot;
use super::ObserveError;

/// Writes `snapshot` as a pickle (protocol 3) to `out`.
///
/// # Errors
/// [`ObserveError::Pickle`] when encoding or writing fails.
pub fn write_pickle(snapshot: &MemorySnapshot, out: &mut impl Write) -> Result<(), ObserveError> {
    serde_pickle::to_writer(out, snapshot, serde_pickle::SerOptions::new())?;
    Ok(())
}

/// The pickle bytes of `snapshot`.
///
/// # Errors
/// [`ObserveError::Pickle`] when encoding fails.
pub fn snapshot_to_pickle(snapshot: &MemorySnapshot) -> Result<Vec<u8>, ObserveError> {
    Ok(serde_pickle::to_vec(
        snapshot,
        serde_pickle::SerOptions::new(),
    )?)
}

/// A snapshot read back from pickle bytes written by [`write_pickle`].
///
/// # Errors
/// [`ObserveError::Pickle`] when the bytes are not such a pickle.
pub fn snapshot_from_pickle(bytes: &[u8]) -> Result<MemorySnapshot, ObserveError> {
    Ok(serde_pickle::from_slice(
        bytes,
        serde_pickle::DeOptions::new(),
    )?)
}

impl MemorySnapshot {
    /// Writes the snapshot to `path`: a pickle when the name ends in `.pickle` or `.pkl`
    /// (for the memory visualizer), JSON otherwise.
    ///
    /// # Errors
    /// [`ObserveError`] when encoding or writing fails.
    pub fn save(&self, path: &Path) -> Result<(), ObserveError> {
        let pickle = path
            .extension()
            .is_some_and(|e| e == "pickle" || e == "pkl");
        let bytes = if pickle {
            snapshot_to_pickle(self)?
        } else {
            self.to_json()?.into_bytes()
        };
        std::fs::write(path, bytes)?;
        Ok(())
    }
}

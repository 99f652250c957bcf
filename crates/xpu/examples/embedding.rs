//! Embedding xpu in a framework: a tensor storage built on `raw_alloc` / `raw_delete` and the
//! current stream, the way PyTorch's storages sit on `caching_allocator_alloc`.
//!
//! `cargo run -p xpu --example embedding`

mod support;

use xpu::xpu_alloc::{raw_alloc, raw_delete, with_raw_view, DevicePtr};

/// A framework's storage: owns a raw device pointer; frees it on drop.
struct Storage {
    ptr: DevicePtr,
    bytes: u64,
}

impl Storage {
    fn new(bytes: u64) -> Result<Self, xpu::Error> {
        xpu::lazy_init()?;
        // Allocated for the current device's current stream: kernels the framework enqueues on
        // that stream may use it without synchronization.
        Ok(Storage {
            ptr: raw_alloc(bytes)?,
            bytes,
        })
    }

    /// Fills the storage with a byte on the current stream (a real OpenCL command on the
    /// block's bytes, through a view scoped to the allocation: it cannot outlive
    /// `raw_delete` nor reach past the storage's end).
    fn fill(&self, value: u8) -> Result<(), Box<dyn std::error::Error>> {
        let stream = xpu::current_stream(Some(self.ptr.device()))?;
        with_raw_view(self.ptr, |view| {
            view.fill(&stream, &[value], 0, self.bytes as usize)
        })??;
        Ok(())
    }

    fn read(&self) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
        let stream = xpu::current_stream(Some(self.ptr.device()))?;
        let mut out = vec![0; self.bytes as usize];
        with_raw_view(self.ptr, |view| view.read(&stream, 0, &mut out))??;
        Ok(out)
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        // Never panics: a failure is logged.
        if let Err(e) = raw_delete(self.ptr) {
            eprintln!("storage free failed: {e}");
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let t = Storage::new(3000)?;
    t.fill(7)?;
    let data = t.read()?;
    println!(
        "storage at {:#x} ({} B on device {}): all sevens? {}",
        t.ptr.address(),
        t.bytes,
        t.ptr.device(),
        data.iter().all(|b| *b == 7)
    );
    let old = t.ptr.address();
    drop(t);
    let u = Storage::new(3000)?;
    println!(
        "a new storage of the same size reuses the cached block: {}",
        u.ptr.address() == old
    );
    let err = raw_delete(DevicePtr::new(0, 0xdead_beef)).unwrap_err();
    println!("freeing an unknown pointer is a typed error: {err}");
    Ok(())
}

fn main() -> std::process::ExitCode {
    support::main(run)
}

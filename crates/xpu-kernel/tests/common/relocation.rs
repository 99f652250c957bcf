//! What the relocation tests share (`relocation_graph_capture.rs`, `relocation_graph_replay.rs`,
//! `relocation_launch_args.rs`, from reviews h13-h15): patterns, fresh streams, the device's
//! move count and the clearing layout that makes the global allocator move a block.

use std::sync::Arc;

use xpu_kernel::DeviceBuffer;
use xpu_stream::Stream;

use super::fresh_stream;

pub const MIB: usize = 1 << 20;

/// Bytes that differ at every position for each seed.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(0x9E37_79B1).rotate_right(13) as u8) ^ seed)
        .collect()
}

/// `N` fresh streams of device 0 (kept registered for the process); `None` without a device.
pub fn streams<const N: usize>() -> Option<[Stream; N]> {
    xpu_testing::devices(1).then(|| std::array::from_fn(|_| fresh_stream(0).leak()))
}

/// The moves device 0's allocator has made.
pub fn relocations() -> u64 {
    xpu_alloc::device_allocator(0)
        .unwrap()
        .core()
        .relocation_stats()
        .moves
}

/// The clearing layout of xpu-alloc's relocation tests on `s`, with the global allocator:
/// segment A (20 MiB) holds p 6, q 2, r 6 and x 6 MiB, segment B y 6 and z 8 MiB; q, x, y, z
/// hold the patterns of seeds 1-4. p and r are freed: an 8 MiB request on `s` then moves q
/// into B's free tail and takes q's old run.
pub fn layout(s: &Stream) -> (Arc<DeviceBuffer<u8>>, Vec<DeviceBuffer<u8>>) {
    xpu_alloc::set_config("relocation:merge").unwrap();
    let a = |mib: usize| DeviceBuffer::<u8>::new(mib * MIB, s).unwrap();
    let (p, q, r, x, y, z) = (a(6), a(2), a(6), a(6), a(6), a(8));
    for (seed, b) in [&q, &x, &y, &z].into_iter().enumerate() {
        let data = pattern(seed as u8 + 1, b.len());
        b.data_ptr().view().unwrap().write(s, 0, &data).unwrap();
    }
    drop((p, r));
    (Arc::new(q), vec![x, y, z])
}

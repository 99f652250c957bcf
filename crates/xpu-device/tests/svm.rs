//! Coarse-grained SVM allocations, where the device reports them.

mod common;

use xpu_device::backend::SvmBuffer;
use xpu_device::DeviceError;

#[test]
fn svm_allocations_are_aligned_and_distinct() {
    let Some(dev) = common::device0() else {
        return;
    };
    let ctx = dev.context().unwrap();
    assert!(matches!(
        SvmBuffer::new(ctx, 0, 0),
        Err(DeviceError::InvalidArgument(_))
    ));
    if !dev.properties().supports_svm {
        eprintln!("skipping the SVM allocations: device 0 reports no coarse-grained SVM");
        return;
    }
    // Devices may refuse alignments above their own (PoCL: 128 bytes), so ask for that one.
    let align = dev.properties().mem_base_addr_align;
    let a = SvmBuffer::new(ctx, 4096, align as u32).unwrap();
    let b = SvmBuffer::new(ctx, 4096, align as u32).unwrap();
    assert_eq!(a.size(), 4096);
    assert_ne!(a.address(), 0);
    assert_eq!(a.address() % align, 0);
    assert_eq!(b.address() % align, 0);
    // Two live allocations do not overlap.
    assert!(a.address() + 4096 <= b.address() || b.address() + 4096 <= a.address());
    assert_eq!(a.as_ptr() as usize as u64, a.address());
}

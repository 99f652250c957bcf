//! `xpu::device_of` of an allocation switches to its device, and `get_per_process_memory_fraction`
//! reads back the memory fraction.
//!
//! Review h27 (the facade as a torch.cuda user meets it): `xpu::device_of` of an allocation.
mod common;

fn dev(test: &str) -> bool {
    common::have_device(test)
}

/// `xpu::device_of(obj)` mirrors `torch.xpu.device_of(tensor)`, and `xpu_device::HasDevice`
/// says it is implemented by "anything that lives on one device (streams, events,
/// allocations)". An allocation (`DataPtr`, `DeviceBuffer`) did not implement it, so the torch
/// idiom `with torch.cuda.device_of(t):` had no equivalent for memory (this did not compile).
/// Expected: a guard switching to the allocation's device, restoring the previous one on drop.
#[test]
fn device_of_an_allocation_switches_to_its_device() {
    if !dev("device_of_an_allocation_switches_to_its_device") || xpu::device_count() < 2 {
        return;
    }
    std::thread::spawn(|| {
        let s1 = xpu::new_stream(Some(1), 0).unwrap();
        let p = xpu::xpu_alloc::allocate(4096, &s1).unwrap();
        let b = xpu::DeviceBuffer::<f32>::new(16, &s1).unwrap();
        assert_eq!(xpu::current_device().unwrap(), 0);
        {
            let _g = xpu::device_of(&p).unwrap();
            assert_eq!(xpu::current_device().unwrap(), 1);
        }
        assert_eq!(xpu::current_device().unwrap(), 0);
        {
            let _g = xpu::device_of(&b).unwrap();
            assert_eq!(xpu::current_device().unwrap(), 1);
        }
        assert_eq!(xpu::current_device().unwrap(), 0);
    })
    .join()
    .unwrap();
}

/// `torch.cuda.get_per_process_memory_fraction(device)` reads back what
/// `set_per_process_memory_fraction` set (1.0 until then); review h27 found only
/// `xpu_alloc::memory_fraction`, not in the facade.
#[test]
fn get_per_process_memory_fraction_reads_back_the_fraction() {
    if !dev("get_per_process_memory_fraction_reads_back_the_fraction") {
        return;
    }
    assert_eq!(xpu::get_per_process_memory_fraction(Some(0)).unwrap(), 1.0);
    xpu::set_per_process_memory_fraction(0.25, Some(0)).unwrap();
    assert_eq!(xpu::get_per_process_memory_fraction(Some(0)).unwrap(), 0.25);
    assert_eq!(xpu::get_per_process_memory_fraction(None).unwrap(), 0.25);
    let n = xpu::device_count();
    assert!(matches!(
        xpu::get_per_process_memory_fraction(Some(n)),
        Err(xpu::Error::Alloc(
            xpu::xpu_alloc::AllocError::InvalidDevice { .. }
        ))
    ));
    xpu::set_per_process_memory_fraction(1.0, Some(0)).unwrap();
}

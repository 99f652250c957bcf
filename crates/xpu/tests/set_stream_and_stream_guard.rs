//! The facade's stream functions against torch.xpu's: `set_stream` and the stream guard.
//!
//! Review h81: passing probes of the facade's stream functions against torch.xpu's
//! (reference `shared/reference/pytorch-runtime.md` §2.4, §2.5, §2.7).

use xpu::{Event, EventFlags};

/// The facade's re-exports are the same items, and its torch-named functions behave as
/// torch's: `set_stream` switches the device (Python), `stream()` restores on drop.
#[test]
fn facade_set_stream_and_stream_guard() {
    if !xpu_testing::devices(2) {
        return;
    }
    let _: fn(EventFlags) -> xpu::Event = Event::new;
    let s1 = xpu::new_stream(Some(1), 7).unwrap();
    assert_eq!((s1.device(), s1.priority()), (1, 1));
    assert_eq!(xpu::priority_range(), (1, -1));
    let s0 = xpu::new_stream(None, 0).unwrap();
    {
        let _g = xpu::stream(s1).unwrap();
        assert_eq!(xpu::current_stream(None).unwrap(), s1);
        assert_eq!(xpu::current_device().unwrap(), 1);
    }
    assert_eq!(xpu::current_device().unwrap(), 0);
    assert_eq!(
        xpu::current_stream(None).unwrap(),
        xpu::default_stream(None).unwrap()
    );
    xpu::set_stream(s1).unwrap();
    assert_eq!(xpu::current_device().unwrap(), 1);
    assert_eq!(xpu::current_stream(None).unwrap(), s1);
    xpu::set_stream(s0).unwrap();
    assert_eq!(xpu::current_device().unwrap(), 0);
    assert_eq!(xpu::current_stream(Some(1)).unwrap(), s1);
    xpu::synchronize(Some(1)).unwrap();
}

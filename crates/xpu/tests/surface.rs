//! The torch.xpu-style surface on a real device.
mod common;

use xpu::{EventFlags, StreamExt};

#[test]
fn devices_streams_and_events_through_the_facade() {
    if !common::have_device("surface") {
        return;
    }
    let n = xpu::device_count();
    let err = xpu::set_device(n + 5).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("device {} is out of range: {n} device(s) available", n + 5)
    );
    let name = xpu::get_device_name(None).unwrap();
    assert_eq!(name, xpu::get_device_properties(Some(0)).unwrap().name);
    assert!(xpu::get_device_capability(None)
        .unwrap()
        .contains_key("has_fp64"));

    let default = xpu::current_stream(None).unwrap();
    let side = xpu::new_stream(None, -1).unwrap();
    assert_ne!(default, side);
    assert_eq!(side.priority(), -1);
    {
        let _g = xpu::stream(side).unwrap();
        assert_eq!(xpu::current_stream(None).unwrap(), side);
    }
    assert_eq!(xpu::current_stream(None).unwrap(), default);

    let mut start = xpu::Event::new(EventFlags {
        enable_timing: true,
        blocking: false,
    });
    let mut end = xpu::Event::new(EventFlags {
        enable_timing: true,
        blocking: false,
    });
    start.record(&side).unwrap();
    side.wait_stream(&default).unwrap();
    end.record(&side).unwrap();
    xpu::synchronize(None).unwrap();
    assert!(end.query().unwrap());
    assert!(start.elapsed_time(&end).unwrap() >= 0.0);

    if n >= 2 {
        let g = xpu::device(1).unwrap();
        assert_eq!(xpu::current_device().unwrap(), 1);
        drop(g);
        assert_eq!(xpu::current_device().unwrap(), 0);
    }
}

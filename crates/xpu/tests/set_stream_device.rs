//! `xpu::set_stream` with a stream of another device makes that device current, as
//! torch.xpu's Python `set_stream`; `xpu_stream::set_stream` keeps the C++ semantics.
mod common;

#[test]
fn set_stream_of_another_device_switches_the_current_device() {
    if !common::have_device("set_stream_device") {
        return;
    }
    if xpu::device_count() < 2 {
        eprintln!(
            "set_stream_device: skipped, needs two devices (POCL_DEVICES=\"pthread pthread\")"
        );
        return;
    }
    assert_eq!(xpu::current_device().unwrap(), 0);
    let before_on_0 = xpu::current_stream(Some(0)).unwrap();
    let s = xpu::new_stream(Some(1), 0).unwrap();
    xpu::set_stream(s).unwrap();
    assert_eq!(
        xpu::current_device().unwrap(),
        1,
        "the stream's device became current"
    );
    assert_eq!(xpu::current_stream(None).unwrap(), s);
    assert_eq!(
        xpu::current_stream(Some(0)).unwrap(),
        before_on_0,
        "device 0's current stream is unchanged"
    );
    // Implicit work follows: an allocation without a device goes to device 1, on `s`.
    let p = xpu::allocate(1000).unwrap();
    assert_eq!(p.device(), 1);
    drop(p);

    // The lower layer keeps C++ `setCurrentXPUStream` semantics: the device does not change.
    xpu::set_device(0).unwrap();
    let s1 = xpu::new_stream(Some(1), -1).unwrap();
    xpu::xpu_stream::set_stream(s1);
    assert_eq!(xpu::current_device().unwrap(), 0);
    assert_eq!(xpu::current_stream(Some(1)).unwrap(), s1);
}

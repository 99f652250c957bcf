//! Every layer's error converts into `xpu::Error` (`?` works in user code), and `xpu::init()`
//! reports a bad `XPU_ALLOC_CONF` itself instead of leaving it to the first allocation.
mod common;

use std::time::Duration;

fn converts<E>()
where
    xpu::Error: From<E>,
{
}

#[test]
fn every_layer_error_converts_into_the_facade_error() {
    converts::<xpu::xpu_device::DeviceError>();
    converts::<xpu::xpu_device::ClError>();
    converts::<xpu::xpu_device::foreign::ForeignError>();
    converts::<xpu::xpu_stream::StreamError>();
    converts::<xpu::xpu_event::EventError>();
    converts::<xpu::xpu_lazy::LazyError>();
    converts::<xpu::xpu_alloc::AllocError>();
    converts::<xpu::xpu_alloc::ConfigError>();
    converts::<xpu::xpu_alloc::HostError>();
    converts::<xpu::xpu_alloc::SourceError>();
    converts::<xpu::xpu_alloc::MarkerError>();
    converts::<xpu::xpu_alloc::observe::ObserveError>();
    converts::<xpu::xpu_alloc::replay::ReplayError>();
    converts::<xpu::MemoryError>();
    converts::<xpu::KernelError>();
    converts::<xpu::InteropError>();

    // `?` in user code, message unchanged.
    fn user_code() -> xpu::Result<()> {
        let bad: Result<(), xpu::xpu_device::ClError> = Err(xpu::xpu_device::ClError::new(
            "clSetKernelArg",
            -51, // CL_INVALID_ARG_SIZE
        ));
        bad?;
        Ok(())
    }
    let e = user_code().unwrap_err();
    assert!(
        matches!(
            e,
            xpu::Error::Device(xpu::xpu_device::DeviceError::OpenCl(_))
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("clSetKernelArg"), "{e}");

    fn config_code() -> xpu::Result<()> {
        xpu::xpu_alloc::AllocConfig::parse("no_such_key:1")?;
        Ok(())
    }
    let e = config_code().unwrap_err();
    assert!(
        matches!(e, xpu::Error::Alloc(xpu::xpu_alloc::AllocError::Config(_))),
        "{e:?}"
    );
    assert!(e.to_string().contains("no_such_key"), "{e}");

    fn host_code() -> xpu::Result<()> {
        Err(xpu::xpu_alloc::HostError::NoBuffer)?
    }
    assert!(matches!(host_code().unwrap_err(), xpu::Error::Host(_)));

    fn memory_code() -> xpu::Result<()> {
        Err(xpu::MemoryError::LengthMismatch { src: 1, dst: 2 })?
    }
    let e = memory_code().unwrap_err();
    assert!(matches!(e, xpu::Error::Memory(_)));
    assert_eq!(
        e.to_string(),
        "copy length mismatch: the source has 1 elements, the destination 2"
    );
}

const INIT_TEST: &str = "init_fails_on_a_bad_alloc_conf";

#[test]
fn init_fails_on_a_bad_alloc_conf() {
    if let Some(s) = common::scenario() {
        // A fresh child process: nothing read the configuration yet.
        std::env::set_var("XPU_ALLOC_CONF", s);
        match xpu::init() {
            Err(xpu::Error::Alloc(xpu::xpu_alloc::AllocError::Config(e))) => {
                println!("CONFIG ERROR: {e}")
            }
            Err(e) => println!("OTHER ERROR: {e}"),
            Ok(()) => println!("INIT OK"),
        }
        return;
    }
    if !common::have_device(INIT_TEST) {
        return;
    }
    let (code, out) = common::run_scenario(
        INIT_TEST,
        "max_split_size_mb:banana",
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("CONFIG ERROR") && out.contains("max_split_size_mb"),
        "init must fail with the config error naming the key: {out}"
    );
    let (code, out) =
        common::run_scenario(INIT_TEST, "max_split_size_mb:64", Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("INIT OK"),
        "a good configuration initializes: {out}"
    );
}

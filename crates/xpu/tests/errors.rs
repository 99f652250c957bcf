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

/// A layer's `BadFork` answers `is_bad_fork` however deep the facade's error holds it: in
/// every layer error that wraps a lower one (kernel > memory/interop > alloc/host/event >
/// stream > device), and in the errors that keep one as their source.
#[test]
fn a_bad_fork_nested_in_any_layer_error_is_a_bad_fork() {
    use xpu::xpu_alloc::{AllocError, BlockArgError, HostError};
    use xpu::xpu_device::DeviceError;
    use xpu::xpu_event::EventError;
    use xpu::xpu_stream::StreamError;
    use xpu::{Error, InteropError, KernelError, MemoryError};

    let kernel = |e: KernelError| Error::Kernel(Box::new(e));
    let device_in_stream = || StreamError::Device(DeviceError::BadFork);
    let bad_forks: Vec<(&str, Error)> = vec![
        ("Stream(Device)", Error::Stream(device_in_stream())),
        (
            "Event(Stream(Device))",
            Error::Event(EventError::Stream(device_in_stream())),
        ),
        (
            "Host(Stream(Device))",
            Error::Host(Box::new(HostError::Stream(device_in_stream()))),
        ),
        (
            "Host(OutOfMemory { source: BadFork })",
            Error::Host(Box::new(HostError::OutOfMemory {
                device: 0,
                size: 64,
                source: DeviceError::BadFork,
            })),
        ),
        (
            "Memory(Host(Stream(Device)))",
            Error::Memory(Box::new(MemoryError::Host(HostError::Stream(
                device_in_stream(),
            )))),
        ),
        (
            "Interop(Stream)",
            Error::Interop(InteropError::Stream(StreamError::BadFork)),
        ),
        (
            "Interop(Alloc)",
            Error::Interop(InteropError::Alloc(AllocError::BadFork)),
        ),
        (
            "Interop(Event(Device))",
            Error::Interop(InteropError::Event(EventError::Device(
                DeviceError::BadFork,
            ))),
        ),
        (
            "Interop(Block(Device))",
            Error::Interop(InteropError::Block(BlockArgError::Device(
                DeviceError::BadFork,
            ))),
        ),
        (
            "Interop(Block(Alloc))",
            Error::Interop(InteropError::Block(BlockArgError::Alloc(
                AllocError::BadFork,
            ))),
        ),
        (
            "Kernel(Memory(Alloc))",
            kernel(KernelError::Memory(Box::new(MemoryError::Alloc(
                AllocError::BadFork,
            )))),
        ),
        (
            "Kernel(Memory(Host))",
            kernel(KernelError::Memory(Box::new(MemoryError::Host(
                HostError::BadFork,
            )))),
        ),
        (
            "Kernel(Interop(Event))",
            kernel(KernelError::Interop(Box::new(InteropError::Event(
                EventError::BadFork,
            )))),
        ),
        (
            "Kernel(Stream(Device))",
            kernel(KernelError::Stream(device_in_stream())),
        ),
        (
            "Kernel(Block { source: BadFork })",
            kernel(KernelError::Block {
                kernel: "k".into(),
                index: 0,
                source: AllocError::BadFork,
            }),
        ),
    ];
    let missed: Vec<&str> = bad_forks
        .iter()
        .filter(|(_, e)| !e.is_bad_fork())
        .map(|(name, _)| *name)
        .collect();
    assert!(missed.is_empty(), "not reported as a bad fork: {missed:?}");
    // The message shows the layers' own bad-fork message.
    for (name, e) in &bad_forks {
        assert!(
            e.to_string()
                .contains(xpu::xpu_device::fork::BAD_FORK_MESSAGE),
            "{name}: {e}"
        );
    }

    let others: Vec<(&str, Error)> = vec![
        ("Interop(ReadOnly)", Error::Interop(InteropError::ReadOnly)),
        (
            "Kernel(Memory(LengthMismatch))",
            kernel(KernelError::Memory(Box::new(MemoryError::LengthMismatch {
                src: 1,
                dst: 2,
            }))),
        ),
        (
            "Event(Stream(ExternalNull))",
            Error::Event(EventError::Stream(StreamError::ExternalNull)),
        ),
        (
            "Source(OutOfMemory)",
            Error::Source(xpu::xpu_alloc::SourceError::OutOfMemory),
        ),
        (
            "Observe(DeviceIndex)",
            Error::Observe(xpu::xpu_alloc::observe::ObserveError::DeviceIndex {
                device: 99,
                max: 63,
            }),
        ),
    ];
    for (name, e) in &others {
        assert!(!e.is_bad_fork(), "{name} is not a bad fork");
    }
}

/// One failure reaches the facade in one shape: a typed-memory or interop failure that
/// passed through a kernel-layer function (`KernelError::Memory` / `KernelError::Interop`)
/// is `Error::Memory` / `Error::Interop`, as when it comes straight from its layer. Messages are
/// unchanged.
#[test]
fn a_failure_reaches_the_facade_in_one_shape_whatever_function_returned_it() {
    use xpu::xpu_alloc::HostError;
    use xpu::{Error, InteropError, KernelError, MemoryError};

    let memory = || MemoryError::Host(HostError::NoBuffer);
    for e in [
        Error::from(memory()),
        Error::from(KernelError::from(memory())),
    ] {
        assert!(matches!(&e, Error::Memory(m) if **m == memory()), "{e:?}");
        assert_eq!(e.to_string(), memory().to_string());
    }

    let interop = || InteropError::Library { code: -1024 };
    for e in [
        Error::from(interop()),
        Error::from(KernelError::from(interop())),
    ] {
        assert!(
            matches!(e, Error::Interop(InteropError::Library { code: -1024 })),
            "{e:?}"
        );
        assert_eq!(e.to_string(), interop().to_string());
    }

    // A kernel-layer error of its own stays `Error::Kernel`.
    let e = Error::from(KernelError::ArgCount {
        kernel: "k".into(),
        expected: 2,
        given: 1,
    });
    assert!(matches!(e, Error::Kernel(_)), "{e:?}");
}

//! `xpu bench`: the runtime's speed figures in one JSON object (streams and events with
//! their raw OpenCL floors, the caching device allocator, the pinned host allocator, lazy
//! initialization, kernel launches, graph replay vs launches, program caching, typed uploads,
//! and CLBlast's SGEMM on xpu vs on a plain queue), with the device and the date.

use std::collections::BTreeMap;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use serde_json::{json, Value};
use xpu_alloc::AllocConfig;

/// Options of `xpu bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Print one JSON object of named figures.
    #[arg(long)]
    pub json: bool,
    /// Device to measure (default: device 0, the process's current device).
    #[arg(long)]
    pub device: Option<usize>,
    /// CI-sized runs: fewer iterations and smaller copies (figures are noisier).
    #[arg(long)]
    pub quick: bool,
    /// The configuration of the measured device allocator (the one used is in the output:
    /// `alloc_conf`).
    #[command(flatten)]
    pub alloc: crate::alloc_conf::AllocConfArg,
}

/// Options of the hidden `xpu lazy-init-probe` used by `xpu bench` for `lazy_init_ms`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProbeArgs {
    /// Device whose context is created.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
}

/// Milliseconds from nothing to device enumeration plus the context of `device`, measured
/// in this process: valid only while nothing else has touched the driver yet.
fn first_init_ms(device: usize) -> anyhow::Result<f64> {
    let t = Instant::now();
    let count = xpu_device::device_count();
    anyhow::ensure!(
        device < count,
        "device {device} not found ({count} devices)"
    );
    xpu_device::device(device)?.context()?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

/// Runs the hidden probe: prints [`first_init_ms`] of a fresh process.
///
/// # Errors
/// No such device, or a driver failure.
pub fn run_probe(args: &ProbeArgs) -> anyhow::Result<ExitCode> {
    let ms = first_init_ms(args.device)?;
    crate::print_out(&format!("{ms}\n"))?;
    Ok(ExitCode::SUCCESS)
}

/// `lazy_init_ms`: the probe run in a child `xpu` process (a fresh driver state), falling
/// back to this process when the child cannot be run.
fn lazy_init_ms(device: usize) -> anyhow::Result<f64> {
    let child = std::env::current_exe().ok().and_then(|exe| {
        let mut command = Command::new(exe);
        // Before the first enumeration this passes the variables as they are; after it, as
        // they were before it (some ICD loaders truncate them in place).
        xpu_device::pass_icd_env(&mut command)
            .args(["lazy-init-probe", "--device", &device.to_string()])
            .output()
            .ok()
    });
    match child {
        Some(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            text.trim()
                .parse::<f64>()
                .with_context(|| format!("lazy-init probe printed {text:?}"))
        }
        _ => first_init_ms(device),
    }
}

/// The allocator figures of [`crate::alloc_bench`] on `device` (cached and mixed alloc/free,
/// thread scaling) with `config`, about 250 ms per figure (20 ms when `quick`).
fn alloc_figures(
    device: usize,
    quick: bool,
    config: &AllocConfig,
) -> anyhow::Result<Vec<(String, f64)>> {
    let budget = Duration::from_millis(if quick { 20 } else { 250 });
    Ok(crate::alloc_bench::run_with_config(
        crate::alloc_bench::BenchTarget::Device(device),
        budget,
        config.clone(),
    )?
    .into_iter()
    .collect())
}

/// The date and time now, UTC, as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// All figures: name -> value (NaN: not measurable here, null in the JSON), the failures of
/// parts that could not run, and notes (why a figure is null).
fn measure(
    device: usize,
    quick: bool,
    config: &AllocConfig,
) -> (
    BTreeMap<String, f64>,
    BTreeMap<String, String>,
    BTreeMap<String, String>,
) {
    let mut figures = BTreeMap::new();
    let mut errors = BTreeMap::new();
    let mut notes = BTreeMap::new();
    let mut take = |part: &str, result: anyhow::Result<Vec<(String, f64)>>| match result {
        Ok(pairs) => figures.extend(pairs),
        Err(e) => {
            errors.insert(part.to_owned(), format!("{e:#}"));
        }
    };
    take(
        "lazy_init",
        lazy_init_ms(device).map(|ms| vec![("lazy_init_ms".to_owned(), ms)]),
    );
    take(
        "stream_event",
        crate::event_bench::run(device).map_err(Into::into),
    );
    take("device_alloc", alloc_figures(device, quick, config));
    let host_cfg = if quick {
        crate::host_bench::BenchConfig {
            copy_bytes: 16 << 20,
            copies: 4,
            rounds: 2,
            alloc_iters: 20_000,
            alloc_size: 4096,
        }
    } else {
        crate::host_bench::BenchConfig::default()
    };
    take(
        "host_alloc",
        crate::host_bench::run_with(device, &host_cfg).map_err(Into::into),
    );
    take(
        "kernel",
        xpu_bench::launch::run(device, quick).map_err(Into::into),
    );
    take("typed_memory", crate::bench_typed::figures(device, quick));
    match clblast_figures(device, quick) {
        Ok(Ok(pairs)) => figures.extend(pairs),
        Ok(Err(why)) => {
            notes.insert("clblast_unavailable".to_owned(), why);
            for key in CLBLAST_KEYS {
                figures.insert(key.to_owned(), f64::NAN);
            }
        }
        Err(e) => {
            errors.insert("clblast".to_owned(), format!("{e:#}"));
        }
    }
    // The pinned pair over the C library's malloc + free of 4 KiB measured in this run
    // (issue 26's floor for the host allocator).
    if let (Some(host), Some(malloc)) = (
        figures.get("host_cached_alloc_free_ns").copied(),
        figures.get("malloc_free_ns").copied(),
    ) {
        figures.insert(
            "host_cached_alloc_free_over_malloc".to_owned(),
            host / malloc,
        );
    }
    (figures, errors, notes)
}

/// The figures of `xpu_bench::launch::clblast`, null (NaN) without CLBlast.
const CLBLAST_KEYS: [&str; 3] = [
    "clblast_sgemm_xpu_gflops",
    "clblast_sgemm_plain_gflops",
    "clblast_over_plain",
];

/// The CLBlast figures of `xpu_bench::launch::clblast`, or why CLBlast (loaded at run time)
/// is not available: then [`CLBLAST_KEYS`] are null in the JSON and `clblast_unavailable`
/// says why; not an error.
fn clblast_figures(
    device: usize,
    quick: bool,
) -> anyhow::Result<Result<Vec<(String, f64)>, String>> {
    use xpu::xpu_device::foreign::ForeignError;
    use xpu::xpu_kernel::{InteropError, KernelError};
    match xpu_bench::launch::clblast(device, quick) {
        Ok(pairs) => Ok(Ok(pairs)),
        Err(KernelError::Interop(e))
            if matches!(*e, InteropError::Foreign(ForeignError::NotAvailable { .. })) =>
        {
            Ok(Err(e.to_string()))
        }
        Err(e) => Err(e.into()),
    }
}

/// Runs `xpu bench`: exit code 1 when a part failed (its error is in the output).
///
/// # Errors
/// No such device, an invalid allocator configuration, or a failed write.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let (conf_text, config) = args.alloc.alloc_config()?;
    let device = crate::resolve_device(args.device)?;
    let props = xpu_device::get_device_properties(device)?;
    if !args.json {
        crate::print_err(&format!(
            "measuring on device {device} ({}); this takes a few seconds",
            props.name
        ));
    }
    let (figures, errors, notes) = measure(device, args.quick, &config);
    let mut out = serde_json::Map::new();
    out.insert(
        "device".into(),
        json!({"index": device, "name": props.name, "platform": props.platform_name}),
    );
    out.insert("date".into(), Value::String(utc_now()));
    out.insert("quick".into(), Value::Bool(args.quick));
    out.insert("alloc_conf".into(), Value::String(conf_text.clone()));
    for (name, value) in &figures {
        out.insert(name.clone(), json!(value));
    }
    if !errors.is_empty() {
        out.insert("errors".into(), json!(errors));
    }
    for (name, note) in &notes {
        out.insert(name.clone(), Value::String(note.clone()));
    }
    if args.json {
        crate::print_out(&(Value::Object(out).to_string() + "\n"))?;
    } else {
        let mut text = format!(
            "device {device}: {} ({}), allocator configuration '{conf_text}'\n",
            props.name, props.platform_name
        );
        for (name, value) in &figures {
            text.push_str(&format!("  {name:<34} {value:>14.3}\n"));
        }
        for (part, e) in &errors {
            text.push_str(&format!("  {part}: FAILED: {e}\n"));
        }
        for (name, note) in &notes {
            text.push_str(&format!("  {name}: {note}\n"));
        }
        crate::print_out(&text)?;
    }
    Ok(if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_is_iso_utc() {
        let d = utc_now();
        assert_eq!(d.len(), 20, "{d}");
        assert!(
            d.starts_with("20") && d.ends_with('Z') && d.as_bytes()[10] == b'T',
            "{d}"
        );
    }
}

//! `xpu info [--json]`: the device table, as `torch.xpu.get_device_properties` for every device.

use std::process::ExitCode;

use serde::Serialize;
use xpu_device::{DeviceError, DeviceProperties};

/// Options of `xpu info`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Print `{"devices":[...]}` instead of the table (exit code 0 even without a runtime; the
    /// reason is in an "error" field).
    #[arg(long)]
    pub json: bool,
}

/// One device as `xpu info --json` prints it. Sizes in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceRow {
    /// Device index, as `set_device` takes it.
    pub index: usize,
    /// `CL_DEVICE_NAME`.
    pub name: String,
    /// `CL_DEVICE_VENDOR`.
    pub vendor: String,
    /// `CL_PLATFORM_NAME` of the device's platform.
    pub platform_name: String,
    /// `"cpu"`, `"gpu"`, `"accelerator"` or `"other"`.
    pub device_type: &'static str,
    /// Global memory, bytes.
    pub total_memory: u64,
    /// Largest single allocation, bytes.
    pub max_alloc_size: u64,
    /// Sub-buffer offset alignment, bytes.
    pub mem_base_addr_align: u64,
    /// Compute units.
    pub max_compute_units: u32,
    /// `CL_DEVICE_VERSION`.
    pub opencl_version: String,
    /// `CL_DRIVER_VERSION`.
    pub driver_version: String,
    /// Coarse-grained buffer SVM.
    pub supports_svm: bool,
}

impl DeviceRow {
    /// The row of device `index` with properties `p`.
    pub fn new(index: usize, p: &DeviceProperties) -> DeviceRow {
        DeviceRow {
            index,
            name: p.name.clone(),
            vendor: p.vendor.clone(),
            platform_name: p.platform_name.clone(),
            device_type: p.device_type.as_str(),
            total_memory: p.total_memory,
            max_alloc_size: p.max_alloc_size,
            mem_base_addr_align: p.mem_base_addr_align,
            max_compute_units: p.max_compute_units,
            opencl_version: p.opencl_version.clone(),
            driver_version: p.driver_version.clone(),
            supports_svm: p.supports_svm,
        }
    }
}

/// Every device the runtime sees.
///
/// # Errors
/// Discovery errors: no OpenCL runtime (with the install command), no matching device, a bad
/// `XPU_DEVICE_TYPE`.
pub fn collect() -> Result<Vec<DeviceRow>, DeviceError> {
    Ok(xpu_device::devices()?
        .iter()
        .map(|d| DeviceRow::new(d.index(), d.properties()))
        .collect())
}

/// `{"devices":[...]}`, with an `"error"` field (and no devices) when discovery failed.
#[derive(Debug, Serialize)]
struct Report<'a> {
    devices: &'a [DeviceRow],
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The JSON document of `xpu info --json` (pretty-printed).
pub fn render_json(devices: &Result<Vec<DeviceRow>, DeviceError>) -> String {
    let report = match devices {
        Ok(rows) => Report {
            devices: rows,
            error: None,
        },
        Err(e) => Report {
            devices: &[],
            error: Some(e.to_string()),
        },
    };
    serde_json::to_string_pretty(&report).expect("a report of strings and numbers serializes")
}

/// `bytes` in the largest binary unit that keeps the number at least 1 (`3.8 GiB`, `512 MiB`).
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

const HEADER: [&str; 11] = [
    "#",
    "NAME",
    "PLATFORM",
    "TYPE",
    "MEMORY",
    "MAX ALLOC",
    "ALIGN",
    "CUS",
    "OPENCL",
    "DRIVER",
    "SVM",
];

/// The device table: one header line and one line per device, columns padded to their widths.
pub fn render_table(rows: &[DeviceRow]) -> String {
    let cells: Vec<[String; 11]> = rows
        .iter()
        .map(|r| {
            [
                r.index.to_string(),
                r.name.clone(),
                r.platform_name.clone(),
                r.device_type.to_string(),
                format!("{:.1} GiB", r.total_memory as f64 / f64::from(1u32 << 30)),
                format_bytes(r.max_alloc_size),
                format!("{} B", r.mem_base_addr_align),
                r.max_compute_units.to_string(),
                r.opencl_version.clone(),
                r.driver_version.clone(),
                if r.supports_svm { "yes" } else { "no" }.to_string(),
            ]
        })
        .collect();
    let mut widths = HEADER.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |row: &[&str]| -> String {
        let padded: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(&HEADER);
    for row in &cells {
        out += &line(&row.each_ref().map(String::as_str));
    }
    out
}

/// Prints the device table to stdout, or the discovery error (with the install command when no
/// runtime is installed) to stderr. Returns false on a discovery error.
///
/// # Errors
/// A failed write to stdout.
pub fn print_table() -> anyhow::Result<bool> {
    match collect() {
        Ok(rows) => {
            crate::print_out(&render_table(&rows))?;
            Ok(true)
        }
        Err(e) => {
            crate::print_err(&format!("xpu: {e}"));
            if matches!(e, DeviceError::NoDevices { .. }) {
                crate::print_err("xpu: check XPU_DEVICE_TYPE (gpu, cpu or all) and XPU_PLATFORM");
            }
            Ok(false)
        }
    }
}

/// Runs `xpu info`: exit code 1 when the table form finds no device, 0 for `--json` (whose
/// output then holds the reason).
///
/// # Errors
/// A failed write to stdout.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    if args.json {
        crate::print_out(&(render_json(&collect()) + "\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    Ok(if print_table()? {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(index: usize, name: &str) -> DeviceRow {
        DeviceRow {
            index,
            name: name.to_string(),
            vendor: "Vendor".to_string(),
            platform_name: "Some Platform".to_string(),
            device_type: "gpu",
            total_memory: 3 << 29,
            max_alloc_size: 512 << 20,
            mem_base_addr_align: 128,
            max_compute_units: 8,
            opencl_version: "OpenCL 3.0".to_string(),
            driver_version: "1.2.3".to_string(),
            supports_svm: true,
        }
    }

    #[test]
    fn bytes_use_the_largest_whole_unit() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1024), "1 KiB");
        assert_eq!(format_bytes(512 << 20), "512 MiB");
        assert_eq!(format_bytes(3 << 29), "1.5 GiB");
        assert_eq!(format_bytes(80 << 30), "80 GiB");
    }

    #[test]
    fn table_columns_line_up() {
        let t = render_table(&[row(0, "short"), row(1, "a much longer device name")]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("#  NAME "));
        assert_eq!(
            lines[1],
            "0  short                      Some Platform  gpu   1.5 GiB  512 MiB    \
             128 B  8    OpenCL 3.0  1.2.3   yes"
        );
        let col = |l: &str| l.find("Some Platform").unwrap();
        assert_eq!(col(lines[1]), col(lines[2]));
        assert_eq!(lines[0].find("PLATFORM").unwrap(), col(lines[1]));
    }

    #[test]
    fn json_has_the_documented_fields() {
        let v: serde_json::Value =
            serde_json::from_str(&render_json(&Ok(vec![row(0, "d")]))).expect("valid JSON");
        let d = &v["devices"][0];
        let keys: Vec<&str> = d.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = vec![
            "index",
            "name",
            "vendor",
            "platform_name",
            "device_type",
            "total_memory",
            "max_alloc_size",
            "mem_base_addr_align",
            "max_compute_units",
            "opencl_version",
            "driver_version",
            "supports_svm",
        ];
        let mut got = keys.clone();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
        assert_eq!(d["total_memory"], 3u64 << 29);
        assert_eq!(d["device_type"], "gpu");
        assert_eq!(d["supports_svm"], true);
        assert!(v.get("error").is_none());
    }

    #[test]
    fn json_reports_the_error_with_no_devices() {
        let err = DeviceError::NoRuntime {
            source: xpu_device::ClError::new("clGetPlatformIDs", -1001),
        };
        let v: serde_json::Value = serde_json::from_str(&render_json(&Err(err))).unwrap();
        assert_eq!(v["devices"], serde_json::json!([]));
        let msg = v["error"].as_str().unwrap();
        assert!(msg.contains("apt-get install pocl-opencl-icd"), "{msg}");
    }
}

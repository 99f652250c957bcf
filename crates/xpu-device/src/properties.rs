//! Device properties, read once at enumeration (`clGetDeviceInfo`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::backend::device_id::{device_type as dt, param};
use crate::backend::DeviceId;
use crate::error::ClError;

/// `CL_DEVICE_TYPE` as torch.xpu names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceType {
    /// `CL_DEVICE_TYPE_CPU`.
    Cpu,
    /// `CL_DEVICE_TYPE_GPU`.
    Gpu,
    /// `CL_DEVICE_TYPE_ACCELERATOR`.
    Accelerator,
    /// Anything else.
    Other,
}

impl DeviceType {
    /// `"cpu"`, `"gpu"`, `"accelerator"` or `"other"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            DeviceType::Cpu => "cpu",
            DeviceType::Gpu => "gpu",
            DeviceType::Accelerator => "accelerator",
            DeviceType::Other => "other",
        }
    }
}

/// What a device reports about itself, like `torch.xpu.get_device_properties`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceProperties {
    /// `CL_DEVICE_NAME`.
    pub name: String,
    /// `CL_DEVICE_VENDOR`.
    pub vendor: String,
    /// The platform's `CL_PLATFORM_NAME` (e.g. "NVIDIA CUDA").
    pub platform_name: String,
    /// `CL_DRIVER_VERSION`.
    pub driver_version: String,
    /// `CL_DEVICE_VERSION` (e.g. "OpenCL 3.0 CUDA").
    pub opencl_version: String,
    /// cpu / gpu / accelerator.
    pub device_type: DeviceType,
    /// `CL_DEVICE_GLOBAL_MEM_SIZE`, bytes.
    pub total_memory: u64,
    /// `CL_DEVICE_MAX_MEM_ALLOC_SIZE`: the largest single buffer, bytes.
    pub max_alloc_size: u64,
    /// `CL_DEVICE_MAX_COMPUTE_UNITS`.
    pub max_compute_units: u32,
    /// `CL_DEVICE_MAX_WORK_GROUP_SIZE`.
    pub max_work_group_size: usize,
    /// `CL_DEVICE_MAX_CLOCK_FREQUENCY`, MHz.
    pub max_clock_mhz: u32,
    /// `CL_DEVICE_MEM_BASE_ADDR_ALIGN` converted from bits to bytes: sub-buffer offsets must be
    /// multiples of it.
    pub mem_base_addr_align: u64,
    /// `cl_khr_fp16` present.
    pub has_fp16: bool,
    /// `cl_khr_fp64` present or a non-zero `CL_DEVICE_DOUBLE_FP_CONFIG`.
    pub has_fp64: bool,
    /// `CL_DEVICE_SUB_GROUP_SIZES_INTEL` where reported, else empty.
    pub sub_group_sizes: Vec<usize>,
    /// Coarse-grained buffer SVM (`CL_DEVICE_SVM_CAPABILITIES` bit 0).
    pub supports_svm: bool,
    /// `cl_khr_priority_hints` present: queue priorities reach the driver.
    pub has_priority_hints: bool,
    /// `CL_DEVICE_PROFILING_TIMER_RESOLUTION`, ns.
    pub profiling_timer_resolution_ns: u64,
    /// `CL_DEVICE_UUID_KHR` as 32 hex digits where `cl_khr_device_uuid` is reported.
    pub uuid: Option<String>,
    /// `CL_DEVICE_PCI_BUS_INFO_KHR` as `domain:bus:device.function` where reported.
    pub pci_bus_id: Option<String>,
    /// `CL_DEVICE_EXTENSIONS`, split on whitespace.
    pub extensions: Vec<String>,
}

impl DeviceProperties {
    /// Reads every property of `id`; `platform_name` is passed in by discovery.
    ///
    /// # Errors
    /// A failed `clGetDeviceInfo` for a property every OpenCL device must report.
    pub fn query(id: DeviceId, platform_name: &str) -> Result<DeviceProperties, ClError> {
        let extensions: Vec<String> = id
            .info_string(param::EXTENSIONS)?
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let has = |e: &str| extensions.iter().any(|x| x == e);
        let ty = id.info_u64(param::TYPE)?;
        let device_type = if ty & dt::GPU != 0 {
            DeviceType::Gpu
        } else if ty & dt::CPU != 0 {
            DeviceType::Cpu
        } else if ty & dt::ACCELERATOR != 0 {
            DeviceType::Accelerator
        } else {
            DeviceType::Other
        };
        let uuid = if has("cl_khr_device_uuid") {
            id.info_bytes(param::UUID_KHR)
                .ok()
                .map(|b| b.iter().map(|x| format!("{x:02x}")).collect())
        } else {
            None
        };
        let pci_bus_id = if has("cl_khr_pci_bus_info") {
            id.info_bytes(param::PCI_BUS_INFO_KHR).ok().and_then(|b| {
                let w: Vec<u32> = b
                    .chunks_exact(4)
                    .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                (w.len() == 4).then(|| format!("{:04x}:{:02x}:{:02x}.{}", w[0], w[1], w[2], w[3]))
            })
        } else {
            None
        };
        Ok(DeviceProperties {
            name: id.info_string(param::NAME)?,
            vendor: id.info_string(param::VENDOR)?,
            platform_name: platform_name.to_string(),
            driver_version: id.info_string(param::DRIVER_VERSION)?,
            opencl_version: id.info_string(param::VERSION)?,
            device_type,
            total_memory: id.info_u64(param::GLOBAL_MEM_SIZE)?,
            max_alloc_size: id.info_u64(param::MAX_MEM_ALLOC_SIZE)?,
            max_compute_units: id.info_u64(param::MAX_COMPUTE_UNITS)? as u32,
            max_work_group_size: id.info_u64(param::MAX_WORK_GROUP_SIZE)? as usize,
            max_clock_mhz: id.info_u64(param::MAX_CLOCK_FREQUENCY)? as u32,
            mem_base_addr_align: (id.info_u64(param::MEM_BASE_ADDR_ALIGN)? / 8).max(1),
            has_fp16: has("cl_khr_fp16"),
            has_fp64: has("cl_khr_fp64") || id.info_u64(param::DOUBLE_FP_CONFIG).unwrap_or(0) != 0,
            sub_group_sizes: id
                .info_usize_vec(param::SUB_GROUP_SIZES_INTEL)
                .unwrap_or_default(),
            supports_svm: id.info_u64(param::SVM_CAPABILITIES).unwrap_or(0) & 1 != 0,
            has_priority_hints: has("cl_khr_priority_hints"),
            profiling_timer_resolution_ns: id.info_u64(param::PROFILING_TIMER_RESOLUTION)?,
            uuid,
            pci_bus_id,
            extensions,
        })
    }

    /// The feature flags as a map, like `torch.xpu.get_device_capability`: `has_fp16`,
    /// `has_fp64`, `supports_svm`, `has_priority_hints`, and one `ext:<name>` entry per
    /// extension.
    pub fn capability(&self) -> BTreeMap<String, bool> {
        let mut m = BTreeMap::new();
        m.insert("has_fp16".to_string(), self.has_fp16);
        m.insert("has_fp64".to_string(), self.has_fp64);
        m.insert("supports_svm".to_string(), self.supports_svm);
        m.insert("has_priority_hints".to_string(), self.has_priority_hints);
        m.insert("is_gpu".to_string(), self.device_type == DeviceType::Gpu);
        for e in &self.extensions {
            m.insert(format!("ext:{e}"), true);
        }
        m
    }
}

//! Stream priorities: three levels, as torch.xpu (lower number = higher priority).
//!
//! The priority reaches the driver only where the device reports `cl_khr_priority_hints`
//! ([`DeviceProperties::has_priority_hints`](xpu_device::DeviceProperties)); elsewhere (PoCL,
//! NVIDIA's OpenCL) it is recorded on the stream only and changes nothing in scheduling.

use xpu_device::backend::QueuePriority;

/// Low priority (pool level 0).
pub const PRIORITY_LOW: i32 = 1;
/// Normal priority (pool level 1), the priority of the default stream.
pub const PRIORITY_NORMAL: i32 = 0;
/// High priority (pool level 2).
pub const PRIORITY_HIGH: i32 = -1;

/// The number of priority levels of each device's pool.
pub const LEVELS: usize = 3;

/// `(lowest, highest)` priority, `(1, -1)`, as `torch.xpu.Stream.priority_range()`.
pub const fn priority_range() -> (i32, i32) {
    (PRIORITY_LOW, PRIORITY_HIGH)
}

/// Clamps any priority into the range: above 1 becomes 1, below -1 becomes -1 (as torch.xpu:
/// 10 -> 1, -10 -> -1).
pub const fn clamp_priority(priority: i32) -> i32 {
    if priority > PRIORITY_LOW {
        PRIORITY_LOW
    } else if priority < PRIORITY_HIGH {
        PRIORITY_HIGH
    } else {
        priority
    }
}

/// Level index of a priority: low 0, normal 1, high 2.
pub(crate) const fn level_of(priority: i32) -> usize {
    (PRIORITY_LOW - clamp_priority(priority)) as usize
}

/// Priority of a level index (the inverse of [`level_of`]).
pub(crate) const fn priority_of_level(level: usize) -> i32 {
    PRIORITY_LOW - level as i32
}

/// The `cl_khr_priority_hints` value of a level.
pub(crate) fn hint_of_level(level: usize) -> QueuePriority {
    match level {
        0 => QueuePriority::Low,
        1 => QueuePriority::Medium,
        _ => QueuePriority::High,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamps_like_torch_xpu() {
        assert_eq!(clamp_priority(1), 1);
        assert_eq!(clamp_priority(10), 1);
        assert_eq!(clamp_priority(-10), -1);
        assert_eq!(clamp_priority(0), 0);
        assert_eq!(clamp_priority(i32::MIN), -1);
        assert_eq!(level_of(i32::MAX), 0);
        assert_eq!(level_of(0), 1);
        assert_eq!(level_of(-5), 2);
        for l in 0..LEVELS {
            assert_eq!(level_of(priority_of_level(l)), l);
        }
        assert_eq!(priority_range(), (1, -1));
    }
}

//! Stream id layout (a `u64`, never 0), modeled on torch.xpu's:
//! - bit 0: 1 for streams the runtime created (pool and default streams), 0 for external ones;
//! - bits 1..=3: the level: 0 low, 1 normal, 2 high, 3 the default stream;
//! - native streams: bits 4..=8 hold the pool index (0..32);
//! - external streams: bits 4.. hold a serial number (from 1, never reused).

/// The level value of the default stream.
pub(crate) const DEFAULT_LEVEL: u64 = 3;
/// The id of every device's default stream.
pub(crate) const DEFAULT_ID: u64 = 1 | (DEFAULT_LEVEL << 1);

/// The id of pool stream `index` of `level`.
pub(crate) const fn native(level: usize, index: usize) -> u64 {
    1 | ((level as u64) << 1) | ((index as u64) << 4)
}

/// The id of external stream number `serial` (>= 1) at `level`.
pub(crate) const fn external(level: usize, serial: u64) -> u64 {
    ((level as u64) << 1) | (serial << 4)
}

/// True for streams the runtime created.
pub(crate) const fn is_native(id: u64) -> bool {
    id & 1 == 1
}

/// The level field.
pub(crate) const fn level(id: u64) -> u64 {
    (id >> 1) & 0b111
}

/// The pool index of a native stream.
pub(crate) const fn index(id: u64) -> usize {
    ((id >> 4) & 0b1_1111) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let id = native(2, 31);
        assert!(is_native(id));
        assert_eq!((level(id), index(id)), (2, 31));
        assert!(is_native(DEFAULT_ID));
        assert_eq!(level(DEFAULT_ID), DEFAULT_LEVEL);
        let e = external(1, 5);
        assert!(!is_native(e) && e != 0);
        assert_eq!(level(e), 1);
    }
}

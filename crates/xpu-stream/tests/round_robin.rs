//! Pool round-robin. Its own test binary: no other test takes pool streams concurrently, so
//! the counters are exactly what these tests make them.

mod common;

use std::collections::HashSet;

use xpu_stream::{
    default_stream, get_stream_from_pool, Stream, PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL,
    STREAMS_PER_LEVEL,
};

fn take(priority: i32, n: usize) -> Vec<Stream> {
    (0..n)
        .map(|_| get_stream_from_pool(priority, 0).unwrap())
        .collect()
}

#[test]
fn round_robin_wraps_after_32_and_levels_are_separate() {
    if !common::devices(1) {
        return;
    }
    let mut raw_all = HashSet::new();
    for (p, clamped_alias) in [(PRIORITY_LOW, 7), (PRIORITY_NORMAL, 0), (PRIORITY_HIGH, -9)] {
        let s = take(p, STREAMS_PER_LEVEL + 1);
        let distinct: HashSet<Stream> = s[..STREAMS_PER_LEVEL].iter().copied().collect();
        assert_eq!(
            distinct.len(),
            STREAMS_PER_LEVEL,
            "32 distinct streams per level"
        );
        assert_eq!(
            s[STREAMS_PER_LEVEL], s[0],
            "the 33rd request returns the 1st stream"
        );
        assert_eq!(s[STREAMS_PER_LEVEL].as_raw(), s[0].as_raw());
        assert!(s.iter().all(|x| x.priority() == p && x.device() == 0));
        // A clamped priority continues the same level's counter: index 1 now.
        let next = get_stream_from_pool(clamped_alias, 0).unwrap();
        assert_eq!(next, s[1], "priority {clamped_alias} clamps to {p}");
        for x in &distinct {
            raw_all.insert(x.as_raw().unwrap() as usize);
        }
    }
    // 3 levels x 32 distinct queues, none of them the default stream's.
    assert_eq!(raw_all.len(), 3 * STREAMS_PER_LEVEL);
    let d = default_stream(0).unwrap();
    assert!(!raw_all.contains(&(d.as_raw().unwrap() as usize)));
    assert!(d.is_default() && d.priority() == PRIORITY_NORMAL);
}

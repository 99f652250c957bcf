//! Fan-in forwards and the set-once claim: two sources forwarded to one target, set from two
//! threads beside an application setter; one status reaches the target and the next forward.
//!
//! Review h68 of xpu-device, probes that found nothing (they pass on c61c9e7):
//! `held::set_user_status`'s claim (3c7c1a2 + 2043737: a setter on another thread waits, at
//! most 2 s, for the claim's holder; one on the holder's own thread is refused). Forwards
//! cannot form cycles (`CODE_FORWARD_CYCLE`), so two claims cannot wait on each other across
//! threads; probed here is fan-in: two sources forwarded to one target, set at the same
//! moment from two threads (so that the driver callbacks of both race for the target's
//! claim), the target itself forwarded on, and an application setter of the target racing
//! with both. Each set must return well under the claim's 2 s bound, exactly one status must
//! reach the target, and the next forward must carry it. 200 rounds, PoCL.

mod common;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use xpu_device::backend::EventStatus;

/// How long a driver's completion callbacks may take to set a forward's target.
const SETTLE: Duration = Duration::from_secs(10);
/// A set slower than this waited for a claim (the bound is 2 s).
const SLOW: Duration = Duration::from_millis(1500);

fn is_set(s: EventStatus) -> bool {
    matches!(s, EventStatus::Complete | EventStatus::Error(_))
}

#[test]
fn fan_in_forwards_set_from_two_threads_beside_an_application_setter() {
    let Some((dev, _, _q)) = common::device0_queue() else {
        return;
    };
    let mut slowest = Duration::ZERO;
    for round in 0..200 {
        let a = dev.create_user_event().unwrap();
        let b = dev.create_user_event().unwrap();
        let c = dev.create_user_event().unwrap();
        let d = dev.create_user_event().unwrap();
        a.forward_to(&c).unwrap();
        b.forward_to(&c).unwrap();
        c.forward_to(&d).unwrap();
        let go = Arc::new(Barrier::new(3));
        let timed = |e: xpu_device::backend::ClEvent, fail: bool, go: Arc<Barrier>| {
            std::thread::spawn(move || {
                go.wait();
                let t = Instant::now();
                let r = if fail {
                    e.set_failed(-5)
                } else {
                    e.set_complete()
                };
                (t.elapsed(), r.is_ok())
            })
        };
        let ha = timed(a.clone(), round % 2 == 0, go.clone());
        let hb = timed(b.clone(), round % 3 == 0, go.clone());
        let hc = timed(c.clone(), round % 5 == 0, go.clone());
        let mut oks = 0;
        for h in [ha, hb, hc] {
            let (took, ok) = h.join().unwrap();
            slowest = slowest.max(took);
            oks += usize::from(ok);
        }
        assert!(
            oks >= 2,
            "round {round}: a and b are set by their own setters"
        );
        assert!(
            common::settles(SETTLE, || is_set(c.status().unwrap())
                && is_set(d.status().unwrap())),
            "round {round}: c {:?}, d {:?}",
            c.status(),
            d.status()
        );
        let (cs, ds) = (c.status().unwrap(), d.status().unwrap());
        assert_eq!(
            matches!(cs, EventStatus::Complete),
            matches!(ds, EventStatus::Complete),
            "round {round}: d {ds:?} does not carry c's {cs:?}"
        );
    }
    assert!(slowest < SLOW, "a set took {slowest:?}");
}

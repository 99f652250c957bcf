//! A configuration update wins whole: `set_config` (as
//! `torch.cuda.memory._set_allocator_settings`) and `set_memory_fraction` (as
//! `torch.cuda.set_per_process_memory_fraction`) racing each other leave garbage collection
//! as the final configuration and fraction say (PyTorch runs it when a fraction below 1 and
//! a `garbage_collection_threshold` are both set), whatever the interleaving.

use std::sync::{mpsc, Arc};

use parking_lot::Mutex;

use super::{sim_core, GIB, HANG};
use crate::allocator::device_wide::Update;
use crate::config::AllocConfig;

/// `set_config` with a threshold is held at the hook (its configuration stored, garbage
/// collection not yet published) while another thread sets a fraction below 1 and returns:
/// once both returned, garbage collection is on. Before the fix, `set_config` published
/// what it had computed from the fraction it read before the other thread's update, and
/// left garbage collection off.
#[test]
fn a_memory_fraction_set_during_set_config_leaves_garbage_collection_on() {
    let (cache, _) = sim_core(GIB, "");
    // Whether the other thread's `set_memory_fraction` returned while `set_config` was held
    // (`None`: the hook did not run).
    let arrived = Arc::new(Mutex::new(None));
    let hook = {
        let (other, arrived) = (cache.clone(), arrived.clone());
        move |update: Update| {
            if update != Update::Config {
                return;
            }
            let (tx, rx) = mpsc::channel();
            let other = other.clone();
            std::thread::spawn(move || {
                other.set_memory_fraction(0.5).unwrap();
                let _ = tx.send(());
            });
            // Bounded: a fix that made the fraction wait for `set_config` fails here
            // instead of hanging.
            *arrived.lock() = Some(rx.recv_timeout(HANG).is_ok());
        }
    };
    *cache.inner.shared.update_hook.lock() = Some(Arc::new(hook));
    cache.set_config(AllocConfig::parse("garbage_collection_threshold:0.6").unwrap());
    *cache.inner.shared.update_hook.lock() = None;
    assert_eq!(
        *arrived.lock(),
        Some(true),
        "set_memory_fraction ran to its end while set_config was held"
    );
    assert!((cache.memory_fraction() - 0.5).abs() < f64::EPSILON);
    assert!(
        cache.config().garbage_collection_threshold > 0.0,
        "the configuration was stored"
    );
    assert!(
        cache.inner.shared.gc_enabled(),
        "threshold 0.6 and fraction 0.5 are both set: garbage collection must be on"
    );
}

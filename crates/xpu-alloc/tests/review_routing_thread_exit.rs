//! `use_mem_pool` (as `torch.cuda.use_mem_pool`) called from a thread-local destructor while
//! the thread exits, after the thread's routing state was destroyed, returns a typed error:
//! a panic there (an `AccessError` of the destroyed thread-local) would abort the process.
//! Runs in a child process, so that an abort fails this test instead of killing the test
//! binary.

mod common;

use std::cell::RefCell;
use std::sync::Mutex;
use std::time::Duration;

use xpu_alloc::{AllocError, MemPool};

/// What the thread-local destructor's `use_mem_pool` returned (`None`: it did not run).
static OUTCOME: Mutex<Option<Result<(), AllocError>>> = Mutex::new(None);

/// Calls `use_mem_pool` on its pool when the thread exits.
struct RouteOnExit(MemPool);

impl Drop for RouteOnExit {
    fn drop(&mut self) {
        let outcome = xpu_alloc::use_mem_pool(&self.0).map(drop);
        *OUTCOME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(outcome);
    }
}

thread_local! {
    static ON_EXIT: RefCell<Option<RouteOnExit>> = const { RefCell::new(None) };
}

#[test]
fn use_mem_pool_from_a_thread_local_destructor_after_the_routing_state_is_gone_is_an_error() {
    xpu_testing::scenario_test(
        "use_mem_pool_from_a_thread_local_destructor_after_the_routing_state_is_gone_is_an_error",
        "routing-thread-exit",
        Duration::from_secs(60),
        "done",
        || {
            let pool = MemPool::new(0).unwrap();
            let id = pool.id();
            let in_thread = pool.clone();
            std::thread::spawn(move || {
                // Registered first, so its destructor runs after the routing state's
                // (thread-local destructors run in the reverse order of registration),
                // which the routing below registers.
                ON_EXIT.with_borrow_mut(|slot| *slot = Some(RouteOnExit(in_thread.clone())));
                drop(xpu_alloc::use_mem_pool(&in_thread).unwrap());
            })
            .join()
            .expect("the thread exits normally");
            let outcome = OUTCOME.lock().unwrap().take();
            assert_eq!(
                outcome,
                Some(Err(AllocError::RoutingUnavailable { device: 0, id })),
                "the destructor ran and got the typed error"
            );
            assert_eq!(pool.id(), id);
            // The pool is not left routed: it can be released.
            pool.release().unwrap();
            println!("done");
        },
    );
}

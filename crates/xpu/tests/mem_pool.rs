//! The facade's private pools with torch's names: `mem_pool` (as `torch.xpu.MemPool()`) and
//! `use_mem_pool`; the device's statistics include the pool.
mod common;

#[test]
fn facade_use_mem_pool_routes_this_threads_allocations_and_counts_them_in_the_device() {
    if !common::have_device("mem_pool") {
        return;
    }
    let pool = xpu::mem_pool(Some(0)).unwrap();
    let routed = {
        let _routed = xpu::use_mem_pool(&pool).unwrap();
        let err = xpu::use_mem_pool(&pool).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("beginAllocateToPool: already recording to mempool_id"),
            "{err}"
        );
        xpu::allocate(1000).unwrap()
    };
    assert!(pool.owns(&routed));
    assert_eq!(pool.memory_allocated(), 1024);
    assert_eq!(xpu::memory_allocated(Some(0)).unwrap(), 1024);
    assert_eq!(
        xpu::memory_reserved(Some(0)).unwrap(),
        pool.memory_reserved()
    );
    let plain = xpu::allocate(1000).unwrap();
    assert!(!pool.owns(&plain), "routing ended with the guard");
    assert_eq!(xpu::memory_allocated(Some(0)).unwrap(), 2048);
}

//! Relocation (`relocation:merge`) and burn's f32 matmul through CLBlast: a matmul of a moved
//! tensor on its gated stream does not wait on the host for the gate. One test in its own process.
//!
//! Review h15 (burn under `relocation:merge`, the default): burn's f32 matmul goes through
//! CLBlast, whose operands are lent as `ClRegion`s. One test in its own process: the layout
//! that makes the allocator move a tensor's block is set up from burn's first allocation on
//! device 0.

use std::sync::mpsc;
use std::time::Duration;

use burn_tensor::Tensor;
use xpu::xpu_event::Gate;
use xpu_burn::{Xpu, XpuDevice};

/// Rows of 1,024 `f32` (4 KiB) per MiB.
const ROWS_PER_MIB: usize = 256;

fn full(mib: usize, value: f32, device: &XpuDevice) -> Tensor<Xpu, 2> {
    Tensor::full([mib * ROWS_PER_MIB, 1024], value, device)
}

fn moves() -> u64 {
    xpu::xpu_alloc::device_allocator(0)
        .unwrap()
        .core()
        .relocation_stats()
        .moves
}

/// DEFECT, fixed (failed 5 of 5 before `ClRegion` fixed its place without a host wait and
/// `ForeignCall::call` ordered its stream after the pending copies): burn's `matmul` of a tensor whose block the allocator moved, on burn's
/// stream held by a user-event gate, waits on the host for the gated relocation copy, so the
/// thread that would open the gate never gets there (a hang from safe calls; the gate's
/// watchdog or this test's helper ends it). The same call on a tensor that did not move
/// returns at once. Why: f32 matmul takes CLBlast (`clblast_matmul`), whose operands are
/// `ClRegion::new` -> `DataPtr::cl_mem_and_offset` -> `observe_place`, which waits on the host
/// for a moved block's marker `M` (review h13 fixed that wait for pinned-host copies only).
/// The wait is not needed: `clblast_sgemm` enqueues on burn's stream, the allocation stream,
/// in order after the copy. burn's doc claim "burn's blocks ... never sticky" is also wrong
/// for every f32 matmul operand (they are observed, so fixed for good).
#[test]
fn burn_matmul_of_a_moved_tensor_on_its_gated_stream_does_not_wait_for_the_gate() {
    let device = XpuDevice::new(0);
    let w: Tensor<Xpu, 2> = Tensor::full([1024, 64], 0.5, &device);
    {
        // Warm-up (CLBlast builds its kernels at the first call); the 2 MiB operand's 20 MiB
        // segment is segment A below once it is freed.
        let warm = full(2, 1.0, &device);
        let _ = warm.matmul(w.clone()).into_data();
    }
    // Segment A (20 MiB) holds p 6, q 2, r 6 and x 6 MiB, segment B y 6 and z 8 MiB.
    let p = full(6, 1.0, &device);
    let q = full(2, 3.0, &device);
    let r = full(6, 1.0, &device);
    let x = full(6, 5.0, &device);
    let y = full(6, 7.0, &device);
    let z = full(8, 11.0, &device);
    drop((p, r));
    let _ = q.clone().sum().into_data(); // everything so far completed
    let stream = xpu::xpu_stream::default_stream(0).unwrap();
    let gate = Gate::with_open_limit(0, Duration::from_secs(60)).unwrap();
    gate.block(&stream).unwrap();
    let before = moves();
    // 8 MiB fits no free block: q moves into B's free tail, its copy behind the gate.
    let big = full(8, 13.0, &device);
    let moved = moves() - before;
    assert!(moved >= 1, "q moved ({moved} moves)");
    // Control: a tensor that did not move; then the moved one. The worker reports each
    // return; the limits only detect a hang (they order nothing).
    let (tx, rx) = mpsc::channel();
    let (x_returned, q_returned, (x_out, q_out)) = std::thread::scope(|scope| {
        let h = scope.spawn(|| {
            let x_out = x.clone().slice([0..512, 0..1024]).matmul(w.clone());
            let _ = tx.send("x");
            let q_out = q.clone().matmul(w.clone());
            let _ = tx.send("q");
            (x_out, q_out)
        });
        let x_returned = rx.recv_timeout(Duration::from_secs(20)) == Ok("x");
        let q_returned = x_returned && rx.recv_timeout(Duration::from_secs(10)) == Ok("q");
        gate.open().expect("open");
        (x_returned, q_returned, h.join().expect("no panic"))
    });
    let want = |v: f32| vec![v * 0.5 * 1024.0; 512 * 64];
    assert_eq!(x_out.into_data().to_vec::<f32>().unwrap(), want(5.0));
    assert_eq!(q_out.into_data().to_vec::<f32>().unwrap(), want(3.0));
    assert!(
        x_returned,
        "the matmul of an unmoved tensor returned with the gate closed"
    );
    assert!(
        q_returned,
        "burn's matmul of the moved tensor q waited on the host for the gated relocation copy \
         on its own stream ({moved} moves)"
    );
    drop((x, y, z, big));
}

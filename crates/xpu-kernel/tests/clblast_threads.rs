//! CLBlast's first calls from many threads at once (its own binary: the race is in CLBlast's
//! process-wide caches, which only its first calls fill). CLBlast 1.5 stores compiled
//! programs and tuning databases in caches without a lock (CNugteren/CLBlast#486, fixed in
//! its PR #495): concurrent first SGEMMs crashed in `clblast::Database`'s copy while another
//! thread stored an entry. Skipped without a device unless `XPU_REQUIRE_DEVICE=1`, and
//! without CLBlast unless `XPU_REQUIRE_CLBLAST=1`.

use std::sync::Barrier;

use xpu_device::foreign::clblast::Clblast;
use xpu_kernel::{clblast_sgemm, ClRegion, RowMajorSgemm, StreamMemoryExt, TempBuffer};
use xpu_testing::devices;

#[test]
fn clblast_sgemm_from_many_threads_at_once_matches_the_cpu() {
    match Clblast::get() {
        Ok(_) => {}
        Err(e) if std::env::var("XPU_REQUIRE_CLBLAST").is_ok_and(|v| v == "1") => {
            panic!("XPU_REQUIRE_CLBLAST=1 but {e}")
        }
        Err(_) => return,
    }
    if !devices(1) {
        return;
    }
    let ndev = xpu_device::device_count().min(2);
    const THREADS: usize = 16;
    let start = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let start = &start;
            s.spawn(move || {
                let stream = xpu_stream::default_stream(t % ndev).unwrap();
                let (m, n, k) = (24 + t, 40 - t, 32 + (t % 3));
                let ha: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 7 + t) % 13) as f32 - 6.0)
                    .collect();
                let hb: Vec<f32> = (0..k * n)
                    .map(|i| ((i * 5 + t) % 11) as f32 - 5.0)
                    .collect();
                let da = stream.htod_copy(&ha).unwrap();
                let db = stream.htod_copy(&hb).unwrap();
                let mut dc = stream.htod_copy(&vec![0f32; m * n]).unwrap();
                start.wait();
                for round in 0..3 {
                    let (va, vb) = (da.slice(..).unwrap(), db.slice(..).unwrap());
                    let mut vc = dc.slice_mut(..).unwrap();
                    let (ra, rb) = (ClRegion::new(&va).unwrap(), ClRegion::new(&vb).unwrap());
                    let rc = ClRegion::new_mut(&mut vc).unwrap();
                    let g = RowMajorSgemm::new((m, n, k), &ra, &rb, &rc);
                    let temp = if round == 1 {
                        TempBuffer::Always
                    } else {
                        TempBuffer::AsNeeded
                    };
                    clblast_sgemm(&stream, &g, temp).unwrap();
                }
                let got = dc.to_vec(&stream).unwrap();
                for i in 0..m {
                    for j in 0..n {
                        let want: f32 = (0..k).map(|p| ha[i * k + p] * hb[p * n + j]).sum();
                        assert_eq!(got[i * n + j], want, "thread {t} C[{i}][{j}]");
                    }
                }
            });
        }
    });
}

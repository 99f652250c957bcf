//! CLBlast (loaded at run time through `xpu_device::foreign::clblast`) on xpu streams and
//! caching-allocator regions through `xpu_kernel::clblast_sgemm`: results against the CPU at
//! odd shapes and offsets, the temporary-buffer path with a workspace from the caching
//! allocator, and the checks made before CLBlast sees a region. Skipped without a device
//! unless `XPU_REQUIRE_DEVICE=1`, and without CLBlast unless `XPU_REQUIRE_CLBLAST=1`.

use std::ptr;
use std::sync::{Mutex, MutexGuard, PoisonError};

// The example MLP (example code, not a library module: see its header).
#[allow(dead_code)]
#[path = "../../xpu/examples/support/mlp.rs"]
mod mlp;

use mlp::Rng;
use xpu_device::foreign::clblast::{Clblast, Sgemm};
use xpu_kernel::{
    clblast_sgemm, ClRegion, DeviceBuffer, InteropError, RowMajorSgemm, StreamMemoryExt, TempBuffer,
};
use xpu_stream::Stream;
use xpu_testing::devices;

/// Whether CLBlast can be used here (panics when it is required but missing).
fn clblast() -> bool {
    match Clblast::get() {
        Ok(_) => true,
        Err(e) if std::env::var("XPU_REQUIRE_CLBLAST").is_ok_and(|v| v == "1") => {
            panic!("XPU_REQUIRE_CLBLAST=1 but {e}")
        }
        Err(_) => false,
    }
}

/// A pool stream of device 0 when a device and CLBlast are there (see [`clblast`]), and a
/// guard that runs this file's tests one at a time: some count the caching allocator's
/// allocations of device 0, which another test's allocations would change meanwhile.
fn clblast_stream() -> Option<(Stream, MutexGuard<'static, ()>)> {
    static SERIAL: Mutex<()> = Mutex::new(());
    let serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    (devices(1) && clblast()).then(|| (xpu_stream::get_stream_from_pool(0, 0).unwrap(), serial))
}

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.next_f32()).collect()
}

fn extent(rows: usize, cols: usize, ld: usize) -> usize {
    (rows - 1) * ld + cols
}

/// One SGEMM of `(m, n, k)` with padded leading dimensions and odd offsets on `s`; returns
/// the largest error against the CPU (over every `stride`-th element of C) and the workspace
/// size used.
fn checked_sgemm(
    s: &Stream,
    (m, n, k): (usize, usize, usize),
    stride: usize,
    temp: TempBuffer,
    seed: u64,
) -> (f32, usize) {
    let (lda, ldb, ldc) = (k + 3, n + 1, n + 4);
    let (oa, ob, oc) = (5, 7, 11);
    let (alpha, beta) = (1.25f32, -0.5f32);
    let ha = values(oa + extent(m, k, lda) + 3, seed);
    let hb = values(ob + extent(k, n, ldb) + 5, seed + 1);
    let hc = values(oc + extent(m, n, ldc) + 7, seed + 2);
    let da = s.htod_copy(&ha).unwrap();
    let db = s.htod_copy(&hb).unwrap();
    let mut dc = s.htod_copy(&hc).unwrap();
    let (va, vb) = (da.slice(oa..).unwrap(), db.slice(ob..).unwrap());
    let mut vc = dc.slice_mut(oc..).unwrap();
    let (ra, rb) = (ClRegion::new(&va).unwrap(), ClRegion::new(&vb).unwrap());
    let rc = ClRegion::new_mut(&mut vc).unwrap();
    let g = RowMajorSgemm {
        alpha,
        beta,
        a: (&ra, lda),
        b: (&rb, ldb),
        c: (&rc, ldc),
        ..RowMajorSgemm::new((m, n, k), &ra, &rb, &rc)
    };
    let done = clblast_sgemm(s, &g, temp).unwrap();
    done.event.synchronize().unwrap();
    let got = dc.to_vec(s).unwrap();
    let mut err = 0.0f32;
    for idx in (0..m * n).step_by(stride) {
        let (i, j) = (idx / n, idx % n);
        let dot: f32 = (0..k)
            .map(|p| ha[oa + i * lda + p] * hb[ob + p * ldb + j])
            .sum();
        let at = oc + i * ldc + j;
        err = err.max((got[at] - (alpha * dot + beta * hc[at])).abs());
    }
    // Elements of C's buffer outside the matrix are untouched.
    for (at, (g, h)) in got.iter().zip(&hc).enumerate() {
        let inside = at >= oc && (at - oc) / ldc < m && (at - oc) % ldc < n;
        assert!(
            inside || g.to_bits() == h.to_bits(),
            "element {at} outside C changed"
        );
    }
    (err, done.workspace_bytes)
}

#[test]
fn clblast_sgemm_with_a_caching_allocator_workspace_matches_the_cpu() {
    let Some((s, _serial)) = clblast_stream() else {
        return;
    };
    let before = xpu_alloc::memory_stats(0).unwrap();
    let (err, workspace) = checked_sgemm(&s, (37, 53, 29), 1, TempBuffer::Always, 1);
    assert!(err <= 1e-4, "max |error| vs CPU {err}");
    assert!(
        workspace >= 4,
        "CLBlastSgemmWithTempBuffer got {workspace} bytes"
    );
    s.synchronize().unwrap();
    let after = xpu_alloc::memory_stats(0).unwrap();
    // A, B, C and the workspace: four allocations of the caching allocator.
    assert_eq!(
        after.allocation.all.allocated - before.allocation.all.allocated,
        4,
        "the workspace is counted by the caching allocator"
    );
    let (err, _) = checked_sgemm(&s, (100, 101, 99), 1, TempBuffer::AsNeeded, 2);
    assert!(err <= 1e-4, "max |error| vs CPU {err}");
}

#[test]
fn clblast_sgemm_gives_clblast_the_temporary_buffer_it_asks_for_from_the_allocator() {
    let Some((s, _serial)) = clblast_stream() else {
        return;
    };
    let before = xpu_alloc::memory_stats(0).unwrap();
    // Large and odd enough for CLBlast's indirect kernel, which pads into a temporary buffer
    // (13 MB on PoCL); every 97th element of C is checked against the CPU.
    let (m, n, k) = (1025, 1026, 1024);
    let (err, workspace) = checked_sgemm(&s, (m, n, k), 97, TempBuffer::AsNeeded, 3);
    assert!(err <= 2e-4, "max |error| vs CPU {err}");
    let mut g = Sgemm::row_major(m, n, k, ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    (g.a_ld, g.b_ld, g.c_ld) = (k + 3, n + 1, n + 4);
    (g.a_offset, g.b_offset, g.c_offset) = (5, 7, 11);
    // SAFETY: the stream's live queue; the query enqueues nothing.
    let asked = unsafe {
        Clblast::get()
            .unwrap()
            .sgemm_temp_buffer_size(&g, s.queue().unwrap().as_raw())
    }
    .unwrap();
    assert_eq!(
        workspace, asked,
        "the workspace is the size CLBlast asks for"
    );
    s.synchronize().unwrap();
    let after = xpu_alloc::memory_stats(0).unwrap();
    let allocated = after.allocated_bytes.all.allocated - before.allocated_bytes.all.allocated;
    assert!(
        allocated >= workspace as i64 + 3 * 1025 * 1024 * 4,
        "the workspace's {workspace} bytes are counted by the caching allocator ({allocated})"
    );
}

#[test]
fn clblast_sgemm_checks_regions_before_clblast_sees_them() {
    let Some((s, _serial)) = clblast_stream() else {
        return;
    };
    let a = s.htod_copy(&values(16 * 16, 3)).unwrap();
    let b = s.htod_copy(&values(16 * 38, 4)).unwrap();
    let mut small = DeviceBuffer::<f32>::zeroed(96, &s).unwrap();
    let (ra, rb) = (ClRegion::new(&a).unwrap(), ClRegion::new(&b).unwrap());
    {
        let read_only = ClRegion::new(&small).unwrap();
        let g = RowMajorSgemm::new((2, 38, 16), &ra, &rb, &read_only);
        assert!(matches!(
            clblast_sgemm(&s, &g, TempBuffer::AsNeeded),
            Err(InteropError::ReadOnly)
        ));
    }
    let rc = ClRegion::new_mut(&mut small).unwrap();
    let g = RowMajorSgemm::new((16, 38, 16), &ra, &rb, &rc);
    let e = clblast_sgemm(&s, &g, TempBuffer::AsNeeded).unwrap_err();
    assert!(
        matches!(
            e,
            InteropError::RegionTooShort {
                needed: 608,
                len: 96,
                ..
            }
        ),
        "{e:?}"
    );
}

// `clblast_sgemm`, a safe function, refuses an output region that aliases an input before
// CLBlast runs.

/// C passed as A (the same writable region for both, which the borrow rules allow since
/// `RowMajorSgemm` takes shared references to regions): `C = A·B` would read A while
/// overwriting it. Refused with `InteropError::Aliased` before CLBlast sees the regions, and C
/// keeps its values; as B likewise. It used to be handed to CLBlast.
#[test]
fn clblast_sgemm_refuses_an_output_that_aliases_an_input() {
    let Some((s, _serial)) = clblast_stream() else {
        return;
    };
    let n = 64;
    let c0: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 - 3.0).collect();
    let b = DeviceBuffer::from_slice(&vec![1.0f32; n * n], &s).unwrap();
    let mut c = DeviceBuffer::from_slice(&c0, &s).unwrap();
    {
        let rb = ClRegion::new(&b).unwrap();
        let rc = ClRegion::new_mut(&mut c).unwrap();
        for (name, g) in [
            ("A", RowMajorSgemm::new((n, n, n), &rc, &rb, &rc)),
            ("B", RowMajorSgemm::new((n, n, n), &rb, &rc, &rc)),
        ] {
            let r = clblast_sgemm(&s, &g, TempBuffer::AsNeeded);
            assert!(
                matches!(
                    &r,
                    Err(InteropError::Aliased { written: "C", read, start: 0, end })
                        if *read == name && *end == n * n
                ),
                "C aliasing {name}: {r:?}"
            );
        }
    }
    assert_eq!(s.dtoh_sync_copy(&c).unwrap(), c0, "C was written");
}

/// CLBlast's temporary buffer is a bare `cl_mem` (`CLBlastSgemmWithTempBuffer` takes no
/// offset), so it must be the workspace's own bytes: a workspace block that lies inside a
/// larger segment, after another live allocation, must not hand CLBlast the segment's buffer,
/// whose first bytes are that other allocation's.
#[test]
fn clblast_temp_buffer_in_a_split_segment_leaves_the_other_blocks_bytes_alone() {
    let Some((s, _serial)) = clblast_stream() else {
        return;
    };
    const MIB: usize = 1 << 20;
    let (m, n, k) = (1025, 1026, 1024);
    let ha = values(m * k, 7);
    let hb = values(k * n, 8);
    let a = s.htod_copy(&ha).unwrap();
    let b = s.htod_copy(&hb).unwrap();
    let mut c = DeviceBuffer::<f32>::zeroed(m * n, &s).unwrap();
    // A 40 MiB segment, freed to the cache, then split: `guard` takes its first 20 MiB and
    // the workspace (13 MiB on PoCL) the free rest, at 20 MiB into the segment.
    drop(xpu_alloc::allocate(40 * MIB as u64, &s).unwrap());
    let pattern: Vec<f32> = (0..20 * MIB / 4).map(|i| (i % 1000) as f32 + 0.5).collect();
    let guard = s.htod_copy(&pattern).unwrap();
    assert_eq!(
        ClRegion::new(&guard).unwrap().offset(),
        0,
        "the guard is the segment's first block"
    );
    let (ra, rb) = (ClRegion::new(&a).unwrap(), ClRegion::new(&b).unwrap());
    let rc = ClRegion::new_mut(&mut c).unwrap();
    let g = RowMajorSgemm::new((m, n, k), &ra, &rb, &rc);
    let done = clblast_sgemm(&s, &g, TempBuffer::AsNeeded).unwrap();
    done.event.synchronize().unwrap();
    // PoCL: sub-buffers are safe, so CLBlast got the workspace (13 MiB) as its temporary
    // buffer.
    assert!(done.workspace_bytes > 0, "CLBlast used no temporary buffer");
    let got = guard.to_vec(&s).unwrap();
    let changed = got
        .iter()
        .zip(&pattern)
        .filter(|(g, p)| g.to_bits() != p.to_bits())
        .count();
    assert_eq!(
        changed, 0,
        "{changed} of the guard's elements changed (workspace {} bytes)",
        done.workspace_bytes
    );
    // And the product is right (every 97th element).
    let out = c.to_vec(&s).unwrap();
    for idx in (0..m * n).step_by(97) {
        let (i, j) = (idx / n, idx % n);
        let dot: f32 = (0..k).map(|p| ha[i * k + p] * hb[p * n + j]).sum();
        assert!(
            (out[idx] - dot).abs() <= 2e-4 * k as f32,
            "C[{i}][{j}] {} vs {dot}",
            out[idx]
        );
    }
}

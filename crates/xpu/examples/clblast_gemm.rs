//! A foreign OpenCL library on xpu's streams and caching-allocator memory: CLBlast's SGEMM
//! (loaded at run time from `libclblast.so.1`, Debian package `libclblast1`, by
//! `xpu_device::foreign::clblast`) on two streams, checked against the CPU at odd shapes,
//! offsets and leading dimensions.
//!
//! - Matrices are `DeviceBuffer<f32>` views; `ClRegion` hands CLBlast the `cl_mem` of exactly
//!   the allocation and offsets in elements, and `xpu_kernel::clblast_sgemm` checks each
//!   matrix's extent before CLBlast sees it.
//! - Uploads run on stream 1, SGEMM on stream 2 after an event: the inputs (blocks of stream 1)
//!   are recorded on stream 2 by the foreign call; CLBlast's returned `cl_event` becomes an
//!   `xpu::Event` that stream 1 waits for before reading C back, and that times the SGEMM.
//! - CLBlast's temporary buffer comes from the caching allocator: every other case runs
//!   `CLBlastSgemmWithTempBuffer` with a workspace (`TempBuffer::Always`), the others only
//!   when CLBlast asks for one.
//! - An over-long C is refused by xpu before the call: the neighbouring block is intact.
//!   CLBlast gets the segment's buffer and an offset (as xpu's kernels do, no sub-buffer), so
//!   its own size check sees the segment: xpu's extent checks are what bound the call.
//!
//! Without CLBlast it prints how to install it and exits 0, unless `XPU_REQUIRE_CLBLAST=1`
//! (`cargo xtask test` sets it once it has installed the library).
//!
//! `cargo run -p xpu --example clblast_gemm` (its speed against a plain queue, as
//! `xpu bench --json` reports it: `cargo run --release -p xpu-bench --example clblast_sgemm`)

use xpu::xpu_device::foreign::clblast::Clblast;
use xpu::xpu_kernel::{clblast_sgemm, RowMajorSgemm, TempBuffer};
use xpu::{ClRegion, DeviceBuffer, Event, InteropError, Stream, StreamMemoryExt};

/// The row-major extent of a `rows` x `cols` matrix with leading dimension `ld`, elements.
fn extent(rows: usize, cols: usize, ld: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * ld + cols
    }
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(12_345);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// One checked case: shapes, leading-dimension padding and element offsets of A, B, C.
struct Case {
    m: usize,
    n: usize,
    k: usize,
    pad: usize,
    offsets: (usize, usize, usize),
}

fn run_case(
    s1: &Stream,
    s2: &Stream,
    case: &Case,
    temp: TempBuffer,
    seed: u32,
) -> xpu::Result<(f32, usize)> {
    let Case {
        m,
        n,
        k,
        pad,
        offsets: (oa, ob, oc),
    } = *case;
    let (lda, ldb, ldc) = (k + pad, n + pad, n + 2 * pad);
    let (alpha, beta) = (1.25f32, -0.5f32);
    let ha = values(oa + extent(m, k, lda) + 3, seed);
    let hb = values(ob + extent(k, n, ldb) + 5, seed + 1);
    let hc = values(oc + extent(m, n, ldc) + 7, seed + 2);
    // Uploads on stream 1; SGEMM on stream 2 after them.
    let da = s1.htod_copy(&ha)?;
    let db = s1.htod_copy(&hb)?;
    let mut dc = s1.htod_copy(&hc)?;
    let mut uploaded = Event::default();
    uploaded.record(s1)?;
    uploaded.wait(s2)?;
    let va = da.slice(oa..)?;
    let vb = db.slice(ob..)?;
    let mut vc = dc.slice_mut(oc..)?;
    let (ra, rb) = (ClRegion::new(&va)?, ClRegion::new(&vb)?);
    let rc = ClRegion::new_mut(&mut vc)?;
    let g = RowMajorSgemm {
        m,
        n,
        k,
        alpha,
        a: (&ra, lda),
        b: (&rb, ldb),
        beta,
        c: (&rc, ldc),
    };
    let done = clblast_sgemm(s2, &g, temp)?;
    let (done, workspace) = (done.event, done.workspace_bytes);
    // Stream 1 reads C after CLBlast's event (an xpu Event now).
    done.wait(s1)?;
    let got = dc.to_vec(s1)?;
    let mut want = hc.clone();
    for i in 0..m {
        for j in 0..n {
            let dot: f32 = (0..k)
                .map(|p| ha[oa + i * lda + p] * hb[ob + p * ldb + j])
                .sum();
            let c = &mut want[oc + i * ldc + j];
            *c = alpha * dot + beta * *c;
        }
    }
    let max_err = got
        .iter()
        .zip(&want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0f32, f32::max);
    Ok((max_err, workspace))
}

fn run() -> xpu::Result<bool> {
    let s1 = xpu::new_stream(None, 0)?;
    let s2 = xpu::new_stream(None, 0)?;
    let cases = [
        Case {
            m: 37,
            n: 53,
            k: 29,
            pad: 3,
            offsets: (5, 7, 11),
        },
        Case {
            m: 64,
            n: 64,
            k: 64,
            pad: 0,
            offsets: (0, 0, 0),
        },
        Case {
            m: 1,
            n: 17,
            k: 130,
            pad: 1,
            offsets: (3, 0, 2),
        },
        Case {
            m: 129,
            n: 3,
            k: 65,
            pad: 2,
            offsets: (1, 9, 4),
        },
        Case {
            m: 100,
            n: 101,
            k: 99,
            pad: 5,
            offsets: (13, 17, 19),
        },
        Case {
            m: 517,
            n: 515,
            k: 513,
            pad: 1,
            offsets: (1, 2, 3),
        },
    ];
    let mut ok = true;
    let mut workspace_calls = 0;
    for (i, case) in cases.iter().enumerate() {
        let temp = if i % 2 == 0 {
            TempBuffer::Always
        } else {
            TempBuffer::AsNeeded
        };
        let (err, workspace) = run_case(&s1, &s2, case, temp, i as u32 * 3 + 1)?;
        workspace_calls += usize::from(workspace > 0);
        let tol = 1e-5 * case.k as f32 + 1e-5;
        let good = err <= tol;
        ok &= good;
        println!(
            "sgemm {:>3}x{:<3}x{:>3} pad {} offsets {:?}, workspace {workspace} B: max |error| \
             vs CPU {err:.2e} ({})",
            case.m,
            case.n,
            case.k,
            case.pad,
            case.offsets,
            if good { "ok" } else { "TOO LARGE" }
        );
    }

    // An over-long C: 16 x 38 floats (608) into a 96-float block whose neighbour holds 512.
    let a = s2.htod_copy(&values(16 * 16, 90))?;
    let b = s2.htod_copy(&values(16 * 38, 91))?;
    let mut small = DeviceBuffer::<f32>::zeroed(96, &s2)?;
    let neighbour_values = values(512, 92);
    let neighbour = s2.htod_copy(&neighbour_values)?;
    let (ra, rb) = (ClRegion::new(&a)?, ClRegion::new(&b)?);
    let rc = ClRegion::new_mut(&mut small)?;
    let over_long = RowMajorSgemm::new((16, 38, 16), &ra, &rb, &rc);
    match clblast_sgemm(&s2, &over_long, TempBuffer::AsNeeded) {
        Err(InteropError::RegionTooShort { needed, len, .. }) => {
            println!("over-long C refused by xpu before CLBlast: needs {needed} floats, has {len}")
        }
        other => {
            println!("over-long C NOT refused by xpu: {other:?}");
            ok = false;
        }
    }
    let intact = neighbour.to_vec(&s2)? == neighbour_values;
    println!("neighbouring block intact: {intact}");
    ok &= intact;

    // Timing from CLBlast's own event (streams profile): 256^3.
    let n = 256;
    let x = s2.htod_copy(&values(n * n, 93))?;
    let y = s2.htod_copy(&values(n * n, 94))?;
    let mut z = DeviceBuffer::<f32>::zeroed(n * n, &s2)?;
    let (rx, ry) = (ClRegion::new(&x)?, ClRegion::new(&y)?);
    let rz = ClRegion::new_mut(&mut z)?;
    let mut start = Event::timing();
    start.record(&s2)?;
    let square = RowMajorSgemm::new((n, n, n), &rx, &ry, &rz);
    let end = clblast_sgemm(&s2, &square, TempBuffer::AsNeeded)?.event;
    end.synchronize()?;
    let ms = start.elapsed_time(&end)?;
    println!(
        "sgemm {n}^3 timed by CLBlast's event: {ms:.3} ms ({:.2} GFLOP/s)",
        2.0 * (n * n * n) as f64 / (ms * 1e6)
    );
    println!(
        "SGEMMs with a CLBlast temporary buffer from the caching allocator: {workspace_calls} of {}",
        cases.len()
    );
    ok &= workspace_calls >= cases.len() / 2;
    s1.synchronize()?;
    s2.synchronize()?;
    Ok(ok)
}

fn main() -> std::process::ExitCode {
    let required = std::env::var("XPU_REQUIRE_CLBLAST").is_ok_and(|v| v == "1");
    // The library is loaded here so that a missing one is reported; the SGEMMs load it again
    // through `xpu::clblast_sgemm`.
    match Clblast::get() {
        Ok(_) => {}
        Err(e) if !required => {
            println!(
                "skipped: {e}; install it with `apt-get install libclblast1` \
                 (XPU_REQUIRE_CLBLAST=1 makes this an error)"
            );
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: XPU_REQUIRE_CLBLAST=1 but {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    match run() {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("error: a check failed (see above)");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

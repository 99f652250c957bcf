//! A foreign OpenCL library on xpu's streams and caching-allocator memory: CLBlast's SGEMM
//! (loaded at run time from `libclblast.so.1`, Debian package `libclblast1`) on two streams,
//! checked against the CPU at odd shapes, offsets and leading dimensions.
//!
//! - Matrices are `DeviceBuffer<f32>` views; `ClRegion` hands CLBlast the `cl_mem` of exactly
//!   the allocation and offsets in elements, and `ForeignCall::uses_elements` checks each
//!   matrix's extent before CLBlast sees it.
//! - Uploads run on stream 1, SGEMM on stream 2 after an event: the inputs (blocks of stream 1)
//!   are recorded on stream 2 by the foreign call; CLBlast's returned `cl_event` becomes an
//!   `xpu::Event` that stream 1 waits for before reading C back, and that times the SGEMM.
//! - CLBlast's temporary buffer (when it asks for one) comes from the caching allocator.
//! - An over-long C is refused by xpu before the call, and by CLBlast itself when the check
//!   is skipped (it sees the block's size, not the segment's): the neighbouring block is
//!   intact.
//!
//! Without CLBlast it prints how to install it and exits 0, unless `XPU_REQUIRE_CLBLAST=1`
//! (`cargo xtask test` sets it once it has installed the library).
//!
//! `cargo run -p xpu --example clblast_gemm`

use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use libloading::Library;
use xpu::xpu_device::backend::raw::{cl_command_queue, cl_event, cl_mem};
use xpu::{ClRegion, DeviceBuffer, Event, ForeignExt, InteropError, Stream, StreamMemoryExt};

/// `CLBlastLayoutRowMajor` and `CLBlastTransposeNo` (clblast_c.h).
const ROW_MAJOR: i32 = 101;
const NO_TRANSPOSE: i32 = 111;

/// `CLBlastSgemm` (clblast_c.h, CLBlast 1.5).
type SgemmFn = unsafe extern "C" fn(
    i32,
    i32,
    i32,
    usize,
    usize,
    usize,
    f32,
    cl_mem,
    usize,
    usize,
    cl_mem,
    usize,
    usize,
    f32,
    cl_mem,
    usize,
    usize,
    *mut cl_command_queue,
    *mut cl_event,
) -> i32;

/// `CLBlastSgemmWithTempBuffer`: `CLBlastSgemm` plus a temporary buffer.
type SgemmTempFn = unsafe extern "C" fn(
    i32,
    i32,
    i32,
    usize,
    usize,
    usize,
    f32,
    cl_mem,
    usize,
    usize,
    cl_mem,
    usize,
    usize,
    f32,
    cl_mem,
    usize,
    usize,
    *mut cl_command_queue,
    *mut cl_event,
    cl_mem,
) -> i32;

/// `CLBlastSGemmTempBufferSize`: the temporary buffer's size in bytes for one SGEMM.
type TempSizeFn = unsafe extern "C" fn(
    i32,
    i32,
    i32,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    *mut cl_command_queue,
    *mut usize,
) -> i32;

/// SGEMM calls that took a workspace from the caching allocator.
static WORKSPACE_CALLS: AtomicUsize = AtomicUsize::new(0);

struct Clblast {
    sgemm: SgemmFn,
    sgemm_temp: SgemmTempFn,
    temp_size: TempSizeFn,
    _lib: Library,
}

fn load() -> Result<Clblast, String> {
    // SAFETY: loading libclblast runs only its C++ static initializers, which do not depend
    // on this process's state.
    let lib = unsafe { Library::new("libclblast.so.1") }.map_err(|e| e.to_string())?;
    // SAFETY: the three symbols have the C signatures declared above (clblast_c.h of CLBlast
    // 1.5); the function pointers are used only while `_lib` keeps the library loaded.
    unsafe {
        let sgemm = *lib
            .get::<SgemmFn>(b"CLBlastSgemm\0")
            .map_err(|e| e.to_string())?;
        let sgemm_temp = *lib
            .get::<SgemmTempFn>(b"CLBlastSgemmWithTempBuffer\0")
            .map_err(|e| e.to_string())?;
        let temp_size = *lib
            .get::<TempSizeFn>(b"CLBlastSGemmTempBufferSize\0")
            .map_err(|e| e.to_string())?;
        Ok(Clblast {
            sgemm,
            sgemm_temp,
            temp_size,
            _lib: lib,
        })
    }
}

/// The row-major extent of a `rows` x `cols` matrix with leading dimension `ld`, elements.
fn extent(rows: usize, cols: usize, ld: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * ld + cols
    }
}

/// One row-major SGEMM `C = alpha * A(m x k) * B(k x n) + beta * C` on `stream`.
/// `check_c`: false skips xpu's extent check of C (to show CLBlast's own check on the
/// block-exact buffer).
#[allow(clippy::too_many_arguments)]
fn sgemm(
    blas: &Clblast,
    stream: &Stream,
    (m, n, k): (usize, usize, usize),
    alpha: f32,
    (a, lda): (&ClRegion<'_, f32>, usize),
    (b, ldb): (&ClRegion<'_, f32>, usize),
    beta: f32,
    (c, ldc): (&ClRegion<'_, f32>, usize),
    check_c: bool,
) -> Result<Event, xpu::Error> {
    let call = stream
        .foreign()
        .uses_elements(a, extent(m, k, lda))?
        .uses_elements(b, extent(k, n, ldb))?;
    let call = if check_c {
        call.uses_elements(c, extent(m, n, ldc))?
    } else {
        call.uses(c)?
    };
    let (ao, bo, co) = (
        a.offset_as::<usize>()?,
        b.offset_as::<usize>()?,
        c.offset_as()?,
    );
    let mut queue = stream.as_raw()?;
    let mut temp = 0usize;
    // SAFETY: the size query reads the queue's device and enqueues nothing; `queue` is the
    // stream's live queue.
    let status = unsafe {
        (blas.temp_size)(
            ROW_MAJOR,
            NO_TRANSPOSE,
            NO_TRANSPOSE,
            m,
            n,
            k,
            ao,
            lda,
            bo,
            ldb,
            co,
            ldc,
            &mut queue,
            &mut temp,
        )
    };
    if status != 0 {
        return Err(InteropError::Library {
            code: status.into(),
        }
        .into());
    }
    let (am, bm, cm) = (a.cl_mem(), b.cl_mem(), c.cl_mem());
    // SAFETY: CLBlast reads A and B and writes C (a writable region) within the extents
    // checked above (or, for an unchecked C, refuses when C's buffer, exactly its block, is too
    // small: CLBlast compares the extent with CL_MEM_SIZE before enqueueing), uses the
    // workspace only up to the size it asked for, enqueues on the given queue only, keeps no
    // handle, and hands over the event it returns (the caller of CLBlastSgemm owns it).
    let event = unsafe {
        call.workspace(temp).call(|q| {
            let mut queue = q.queue();
            let mut event: cl_event = ptr::null_mut();
            let status = match q.workspace() {
                Some(ws) => {
                    WORKSPACE_CALLS.fetch_add(1, Ordering::Relaxed);
                    (blas.sgemm_temp)(
                        ROW_MAJOR,
                        NO_TRANSPOSE,
                        NO_TRANSPOSE,
                        m,
                        n,
                        k,
                        alpha,
                        am,
                        ao,
                        lda,
                        bm,
                        bo,
                        ldb,
                        beta,
                        cm,
                        co,
                        ldc,
                        &mut queue,
                        &mut event,
                        ws.cl_mem(),
                    )
                }
                None => (blas.sgemm)(
                    ROW_MAJOR,
                    NO_TRANSPOSE,
                    NO_TRANSPOSE,
                    m,
                    n,
                    k,
                    alpha,
                    am,
                    ao,
                    lda,
                    bm,
                    bo,
                    ldb,
                    beta,
                    cm,
                    co,
                    ldc,
                    &mut queue,
                    &mut event,
                ),
            };
            match status {
                0 if event.is_null() => Ok(None),
                0 => Ok(Some(event)),
                code => Err(code.into()),
            }
        })
    }?;
    Ok(event)
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

fn run_case(blas: &Clblast, s1: &Stream, s2: &Stream, case: &Case, seed: u32) -> xpu::Result<f32> {
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
    let done = sgemm(
        blas,
        s2,
        (m, n, k),
        alpha,
        (&ra, lda),
        (&rb, ldb),
        beta,
        (&rc, ldc),
        true,
    )?;
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
    Ok(max_err)
}

fn run(blas: &Clblast) -> xpu::Result<bool> {
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
    for (i, case) in cases.iter().enumerate() {
        let err = run_case(blas, &s1, &s2, case, i as u32 * 3 + 1)?;
        let tol = 1e-5 * case.k as f32 + 1e-5;
        let good = err <= tol;
        ok &= good;
        println!(
            "sgemm {:>3}x{:<3}x{:>3} pad {} offsets {:?}: max |error| vs CPU {err:.2e} ({})",
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
    let shapes = (16, 38, 16);
    let refused = sgemm(
        blas,
        &s2,
        shapes,
        1.0,
        (&ra, 16),
        (&rb, 38),
        0.0,
        (&rc, 38),
        true,
    );
    match refused {
        Err(xpu::Error::Interop(InteropError::RegionTooShort { needed, len, .. })) => {
            println!("over-long C refused by xpu before CLBlast: needs {needed} floats, has {len}")
        }
        other => {
            println!("over-long C NOT refused by xpu: {other:?}");
            ok = false;
        }
    }
    let unchecked = sgemm(
        blas,
        &s2,
        shapes,
        1.0,
        (&ra, 16),
        (&rb, 38),
        0.0,
        (&rc, 38),
        false,
    );
    match unchecked {
        Err(xpu::Error::Interop(InteropError::Library { code })) => {
            println!("without xpu's check, CLBlast refuses it itself (status {code}): it sees the block's size")
        }
        other => {
            println!("CLBlast accepted the over-long C: {other:?}");
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
    let end = sgemm(
        blas,
        &s2,
        (n, n, n),
        1.0,
        (&rx, n),
        (&ry, n),
        0.0,
        (&rz, n),
        true,
    )?;
    end.synchronize()?;
    let ms = start.elapsed_time(&end)?;
    println!(
        "sgemm {n}^3 timed by CLBlast's event: {ms:.3} ms ({:.2} GFLOP/s)",
        2.0 * (n * n * n) as f64 / (ms * 1e6)
    );
    println!(
        "SGEMMs with a CLBlast temporary buffer from the caching allocator: {}",
        WORKSPACE_CALLS.load(Ordering::Relaxed)
    );
    s1.synchronize()?;
    s2.synchronize()?;
    Ok(ok)
}

/// `--bench [n] [reps]`: GFLOP/s of `reps` row-major n^3 SGEMMs through xpu (caching-allocator
/// blocks, `foreign` calls on a stream, events adopted) and on a plain queue with plain buffers
/// (the same CLBlast call), best of three rounds each, interleaved; one JSON line.
fn bench(blas: &Clblast, n: usize, reps: usize) -> xpu::Result<()> {
    use xpu::xpu_device::backend::{Buffer, MemFlags, QueueOptions};
    let flops = 2.0 * (n * n * n) as f64 * reps as f64;
    let host_a = values(n * n, 7);
    let host_b = values(n * n, 8);

    // Plain: its own queue and buffers.
    let dev = xpu::xpu_device::device(0)?;
    let queue = dev.create_queue(QueueOptions {
        profiling: true,
        priority: None,
    })?;
    let bytes = n * n * 4;
    let plain: Vec<Buffer> = (0..3)
        .map(|_| Buffer::new(dev.context()?, bytes, MemFlags::default()))
        .collect::<Result<_, _>>()?;
    queue.write(&plain[0], 0, bytemuck_bytes(&host_a))?;
    queue.write(&plain[1], 0, bytemuck_bytes(&host_b))?;
    let plain_round = || -> xpu::Result<f64> {
        let t = std::time::Instant::now();
        for _ in 0..reps {
            let mut q = queue.as_raw();
            let mut event: cl_event = ptr::null_mut();
            // SAFETY: the three buffers hold n*n floats each, what a row-major n^3 SGEMM with
            // leading dimensions n touches; `q` is a live in-order queue; the returned event is
            // ours, taken over (and released) by `from_raw_owned`.
            let status = unsafe {
                (blas.sgemm)(
                    ROW_MAJOR,
                    NO_TRANSPOSE,
                    NO_TRANSPOSE,
                    n,
                    n,
                    n,
                    1.0,
                    plain[0].as_raw(),
                    0,
                    n,
                    plain[1].as_raw(),
                    0,
                    n,
                    0.0,
                    plain[2].as_raw(),
                    0,
                    n,
                    &mut q,
                    &mut event,
                )
            };
            if status != 0 {
                return Err(InteropError::Library {
                    code: status.into(),
                }
                .into());
            }
            if !event.is_null() {
                // SAFETY: CLBlast returned this event and its reference is ours.
                drop(unsafe { xpu::xpu_device::backend::ClEvent::from_raw_owned(event) });
            }
        }
        queue.finish()?;
        Ok(flops / t.elapsed().as_secs_f64() / 1e9)
    };

    // Through xpu: caching-allocator blocks on a stream.
    let s = xpu::new_stream(None, 0)?;
    let a = s.htod_copy(&host_a)?;
    let b = s.htod_copy(&host_b)?;
    let mut c = DeviceBuffer::<f32>::zeroed(n * n, &s)?;
    s.synchronize()?;
    let mut xpu_round = || -> xpu::Result<f64> {
        let (ra, rb) = (ClRegion::new(&a)?, ClRegion::new(&b)?);
        let rc = ClRegion::new_mut(&mut c)?;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            sgemm(
                blas,
                &s,
                (n, n, n),
                1.0,
                (&ra, n),
                (&rb, n),
                0.0,
                (&rc, n),
                true,
            )?;
        }
        s.synchronize()?;
        Ok(flops / t.elapsed().as_secs_f64() / 1e9)
    };
    plain_round()?; // warm-up: CLBlast compiles its kernels once per device
    xpu_round()?;
    let (mut best_plain, mut best_xpu) = (0.0f64, 0.0f64);
    for _ in 0..3 {
        best_plain = best_plain.max(plain_round()?);
        best_xpu = best_xpu.max(xpu_round()?);
    }
    println!(
        "{{\"clblast_sgemm_n\": {n}, \"clblast_sgemm_reps\": {reps}, \
         \"clblast_sgemm_xpu_gflops\": {best_xpu:.3}, \"clblast_sgemm_plain_gflops\": {best_plain:.3}, \
         \"clblast_xpu_over_plain\": {:.4}}}",
        best_xpu / best_plain
    );
    Ok(())
}

/// The bytes of a float slice.
fn bytemuck_bytes(v: &[f32]) -> &[u8] {
    bytemuck::cast_slice(v)
}

fn main() -> std::process::ExitCode {
    let required = std::env::var("XPU_REQUIRE_CLBLAST").is_ok_and(|v| v == "1");
    let blas = match load() {
        Ok(b) => b,
        Err(e) if !required => {
            println!(
                "skipped: CLBlast is not available ({e}); install it with \
                 `apt-get install libclblast1` (XPU_REQUIRE_CLBLAST=1 makes this an error)"
            );
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: XPU_REQUIRE_CLBLAST=1 but CLBlast cannot be loaded: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "--bench") {
        let n = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(512);
        let reps = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(20);
        return match bench(&blas, n, reps) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    match run(&blas) {
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

// Raw-OpenCL reduction of the NVIDIA driver crash in crates/xpu-kernel/tests/shared_stream_threads.rs
// (docs/performance.md, 2026-12-03 13:00 UTC). Build: gcc -O2 nvidia_subbuffer_repro.c -lOpenCL -lpthread
// H200, driver 580.159.04, 8 threads x 300 rounds (SIGSEGV = the driver crashed; "bad value" = a later command
// ran before an earlier one of the same in-order queue):
//   crashed: a 3/3 (and 2/2 later), ap, bp 3/3, aw 4/4, awl 1/2, awn 2/2, awf 3/3, ad 3/3, aX 3/3, acX 3/3, aXd 2/2,
//            ac 2/2 (one of them a bad value), b 1/3 (passed 2/3 and 3/3 in other calls), aw with 2 threads 3/3
//   clean:   awe 3/3, awB 3/3, aB 2/2, awq 3/3 (10x slower), awc 3/3, awR 3/3, aR 2/2, acd 3/3, bd 2/2, aw with 1 thread 3/3
// So: making a sub-buffer over bytes that an earlier command still uses through another cl_mem, or making one while
// another thread releases a sub-buffer of the same bytes, breaks the driver; made once and kept (e, c with the bytes
// idle, R) it does not. xpu's rules are mode acd: wait for the bytes' stream before making a sub-buffer over bytes
// another covered, never release a cached one while its segment lives (crates/xpu-alloc/src/source/mod.rs).
// Those rules were not enough for burn's suite at 16 threads (2026-12-03 18:10-18:30 UTC, docs/performance.md): it
// crashed however sub-buffers were made (drained device, enqueues locked out) and ran clean with none, so xpu makes
// no sub-buffer on NVIDIA's OpenCL any more: every block is a segment of its own (`split_segments`).
// Modes P/W/D (program builds during the launches) were written for the next reduction and not yet run on the H200.
// Mode O (2026-12-03 21:3x UTC, H200): one parent buffer, copies and kernels given the parent and the region's
// offset, no sub-buffer at all: clean 12/12 (O 8x300 5/5, O 16x300 3/3, OP 8x300 2/2, OP 16x300 1/1, O 16x3000 1/1)
// while the control a 8x300 crashed 2/2 in the same call: several threads may share one buffer by offsets.
// Mode S (21:3x UTC, H200): the same with one coarse-grained SVM allocation, kernels given pointers into it
// (clSetKernelArgSVMPointer) and copies by clEnqueueSVMMemcpy: clean 11/11 (S 8x300 5/5, S 16x300 3/3, SP 8x300 1/1,
// SP 16x300 1/1, S 16x3000 1/1: 7.35 s against O's 4.85 s in the same call); control a 8x300 crashed 1/1.
// xpu-like block reuse across threads on one in-order queue: regions of one parent buffer are handed out
// from a shared free list; a thread frees its input region right after enqueueing the kernel that reads it,
// and releases that region's sub-buffer AFTER (flag a) or BEFORE (flag b) returning the region to the list.
// usage: pool FLAGS THREADS ROUNDS ; FLAGS: a|b (order), p writes/reads via the parent at the region's offset (else the sub-buffer),
// w waits for the kernel before releasing its input sub-buffer (released idle, no command pending on it),
// e one sub-buffer per region made before the threads start and never released, l one lock around every non-waiting call,
// d clFinish of the shared queue before each clCreateSubBuffer, X a barrier enqueued after each clCreateSubBuffer,
// P one more thread builds programs (new source each time) and makes kernels meanwhile, W with an rwlock (launches read, builds write),
// D the builder drains the shared queue before each build,
// c sub-buffers made during the run but never released, R all made before the threads start (a stock per region) and released during the run,
// O no sub-buffer at all: copies and kernels take the parent buffer and the region's offset (kernel add1o),
// S one coarse-grained SVM allocation instead of the parent: kernels get pointers into it (clSetKernelArgSVMPointer),
// copies are clEnqueueSVMMemcpy,
// B as e but each region a buffer of its own (no sub-buffers), q a queue per thread, n kernel arguments set to NULL after the launch, f a new cl_kernel per launch (released after it)
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static cl_context ctx; static cl_device_id dev; static cl_command_queue shared_q; static cl_program prog; static cl_mem parent;
static void *svm; static const char *flags; static int rounds; static volatile int running = 1; static pthread_rwlock_t bl = PTHREAD_RWLOCK_INITIALIZER;
#define F(c) (strchr(flags, c) != NULL)
#define CK(x) do { int l_ = F('l') && !strstr(#x, "Wait"); if (l_) pthread_mutex_lock(&cl_lock); cl_int e_ = (x); if (l_) pthread_mutex_unlock(&cl_lock); if (e_) { fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(3); } } while (0)
static const char *SRC = "__kernel void add1(__global float *y, __global const float *x, uint n) { size_t i = get_global_id(0); if (i < n) y[i] = x[i] + 1.0f; }\n"
  "__kernel void add1o(__global float *y, ulong yo, __global const float *x, ulong xo, uint n) { size_t i = get_global_id(0); if (i < n) y[yo + i] = x[xo + i] + 1.0f; }";
#define SLOT 4096
#define NREG 64
static pthread_mutex_t pl = PTHREAD_MUTEX_INITIALIZER; static pthread_mutex_t cl_lock = PTHREAD_MUTEX_INITIALIZER; static cl_mem subs[64]; static cl_mem *stock[64]; static int nstock[64];
#define STOCK 600
static int freelist[NREG]; static int nfree;
static int take(void) { pthread_mutex_lock(&pl); if (!nfree) { fprintf(stderr, "pool empty\n"); exit(5); } int r = freelist[--nfree]; pthread_mutex_unlock(&pl); return r; }
static void give(int r) { pthread_mutex_lock(&pl); freelist[nfree++] = r; pthread_mutex_unlock(&pl); }
static cl_mem sub(cl_mem p, size_t off, size_t size);
static cl_mem pop(int r, size_t size) { pthread_mutex_lock(&pl); cl_mem m = nstock[r] ? stock[r][--nstock[r]] : NULL; pthread_mutex_unlock(&pl); if (!m) { fprintf(stderr, "stock empty\n"); exit(6); } (void)size; return m; }
static cl_mem sub(cl_mem p, size_t off, size_t size) { if (F('d')) CK(clFinish(shared_q)); cl_buffer_region r = { off, size }; cl_int e; cl_mem m = clCreateSubBuffer(p, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &e); CK(e); if (F('X')) CK(clEnqueueBarrierWithWaitList(shared_q, 0, NULL, NULL)); return m; }
static void *worker(void *arg) {
  long t = (long)arg; cl_int e;
  cl_command_queue q = F('q') ? clCreateCommandQueueWithProperties(ctx, dev, NULL, &e) : shared_q; if (F('q')) CK(e);
  cl_kernel k = clCreateKernel(prog, F('O') ? "add1o" : "add1", &e); CK(e);
  float host[1024], got[1024];
  for (int r = 0; r < rounds; r++) {
    unsigned n = 1 + (t * 131 + r * 17) % 700;
    for (unsigned i = 0; i < n; i++) host[i] = (float)(t + r + i);
    int rx = take(), ry = take();
    if (F('S')) { /* S: one coarse-grained SVM allocation, blocks are pointers into it (clSetKernelArgSVMPointer) */
      cl_event ev, kev, rev; float *xs = (float *)((char *)svm + (size_t)rx * SLOT), *ys = (float *)((char *)svm + (size_t)ry * SLOT);
      CK(clEnqueueSVMMemcpy(q, CL_FALSE, xs, host, 4 * n, 0, NULL, &ev));
      CK(clSetKernelArgSVMPointer(k, 0, ys)); CK(clSetKernelArgSVMPointer(k, 1, xs)); CK(clSetKernelArg(k, 2, 4, &n));
      size_t g = n; CK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, &kev)); CK(clReleaseEvent(kev));
      give(rx);
      CK(clEnqueueSVMMemcpy(q, CL_FALSE, got, ys, 4 * n, 0, NULL, &rev));
      CK(clWaitForEvents(1, &rev)); CK(clReleaseEvent(rev)); CK(clWaitForEvents(1, &ev)); CK(clReleaseEvent(ev));
      give(ry);
      for (unsigned i = 0; i < n; i++) if (got[i] != host[i] + 1.0f) { fprintf(stderr, "bad value t%ld r%d i%u\n", t, r, i); exit(4); }
      continue;
    }
    if (F('O')) { /* O: no sub-buffer at all: the parent buffer and an offset, for copies and kernels */
      cl_event ev, kev, rev; cl_ulong xo = (cl_ulong)rx * SLOT / 4, yo = (cl_ulong)ry * SLOT / 4;
      CK(clEnqueueWriteBuffer(q, parent, CL_FALSE, (size_t)rx * SLOT, 4 * n, host, 0, NULL, &ev));
      CK(clSetKernelArg(k, 0, sizeof parent, &parent)); CK(clSetKernelArg(k, 1, 8, &yo));
      CK(clSetKernelArg(k, 2, sizeof parent, &parent)); CK(clSetKernelArg(k, 3, 8, &xo)); CK(clSetKernelArg(k, 4, 4, &n));
      size_t g = n; CK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, &kev)); CK(clReleaseEvent(kev));
      give(rx);
      CK(clEnqueueReadBuffer(q, parent, CL_FALSE, (size_t)ry * SLOT, 4 * n, got, 0, NULL, &rev));
      CK(clWaitForEvents(1, &rev)); CK(clReleaseEvent(rev)); CK(clWaitForEvents(1, &ev)); CK(clReleaseEvent(ev));
      give(ry);
      for (unsigned i = 0; i < n; i++) if (got[i] != host[i] + 1.0f) { fprintf(stderr, "bad value t%ld r%d i%u\n", t, r, i); exit(4); }
      continue;
    }
    cl_mem x = (F('e') || F('B')) ? subs[rx] : F('R') ? pop(rx, 4 * n) : sub(parent, (size_t)rx * SLOT, 4 * n);
    cl_event ev;
    if (F('p')) CK(clEnqueueWriteBuffer(q, parent, CL_FALSE, (size_t)rx * SLOT, 4 * n, host, 0, NULL, &ev));
    else CK(clEnqueueWriteBuffer(q, x, CL_FALSE, 0, 4 * n, host, 0, NULL, &ev));
    cl_mem y = (F('e') || F('B')) ? subs[ry] : F('R') ? pop(ry, 4 * n) : sub(parent, (size_t)ry * SLOT, 4 * n);
    if (F('f')) { k = clCreateKernel(prog, "add1", &e); CK(e); }
    CK(clSetKernelArg(k, 0, sizeof y, &y)); CK(clSetKernelArg(k, 1, sizeof x, &x)); CK(clSetKernelArg(k, 2, 4, &n));
    size_t g = n; cl_event kev; if (F('W')) pthread_rwlock_rdlock(&bl); CK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, &kev)); if (F('W')) pthread_rwlock_unlock(&bl);
    if (F('w')) CK(clWaitForEvents(1, &kev)); /* w: x idle before its release */
    CK(clReleaseEvent(kev));
    if (F('n')) { cl_mem z = NULL; CK(clSetKernelArg(k, 0, sizeof z, &z)); CK(clSetKernelArg(k, 1, sizeof z, &z)); }
    if (F('f')) CK(clReleaseKernel(k));
    if (F('e') || F('B')) give(rx); else if (F('c')) give(rx); else if (F('b')) { CK(clReleaseMemObject(x)); give(rx); } else { give(rx); CK(clReleaseMemObject(x)); }
    cl_event rev;
    if (F('p')) CK(clEnqueueReadBuffer(q, parent, CL_FALSE, (size_t)ry * SLOT, 4 * n, got, 0, NULL, &rev));
    else CK(clEnqueueReadBuffer(q, y, CL_FALSE, 0, 4 * n, got, 0, NULL, &rev));
    CK(clWaitForEvents(1, &rev)); CK(clReleaseEvent(rev)); CK(clWaitForEvents(1, &ev)); CK(clReleaseEvent(ev));
    if (F('e') || F('B')) give(ry); else if (F('c')) give(ry); else if (F('b')) { CK(clReleaseMemObject(y)); give(ry); } else { give(ry); CK(clReleaseMemObject(y)); }
    for (unsigned i = 0; i < n; i++) if (got[i] != host[i] + 1.0f) { fprintf(stderr, "bad value t%ld r%d i%u\n", t, r, i); exit(4); }
  }
  if (!F('f')) CK(clReleaseKernel(k));
  return NULL;
}
static void *builder(void *arg) {
  (void)arg; long i = 0; char src[256]; cl_int e;
  while (running) {
    snprintf(src, sizeof src, "__kernel void k%ld(__global float *y) { y[get_global_id(0)] = %ld.0f; }", i, i);
    char name[32]; snprintf(name, sizeof name, "k%ld", i); i++;
    const char *ps = src;
    if (F('W')) pthread_rwlock_wrlock(&bl);
    if (F('D')) CK(clFinish(shared_q));
    cl_program p = clCreateProgramWithSource(ctx, 1, &ps, NULL, &e); CK(e); CK(clBuildProgram(p, 1, &dev, "", NULL, NULL));
    cl_kernel k = clCreateKernel(p, name, &e); CK(e);
    if (F('W')) pthread_rwlock_unlock(&bl);
    CK(clReleaseKernel(k)); CK(clReleaseProgram(p));
  }
  fprintf(stderr, "built %ld programs\n", i);
  return NULL;
}
int main(int argc, char **argv) {
  flags = argc > 1 ? argv[1] : "ap"; int threads = argc > 2 ? atoi(argv[2]) : 8; rounds = argc > 3 ? atoi(argv[3]) : 60;
  cl_platform_id plats[8]; cl_uint np; CK(clGetPlatformIDs(8, plats, &np));
  cl_int e = -1;
  for (cl_uint i = 0; i < np; i++) { cl_uint nd; if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_GPU, 1, &dev, &nd) == 0 && nd) { e = 0; break; } }
  if (e) { CK(clGetDeviceIDs(plats[0], CL_DEVICE_TYPE_ALL, 1, &dev, NULL)); }
  char name[256]; clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
  ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e); CK(e);
  shared_q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &e); CK(e);
  prog = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &e); CK(e); CK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
  parent = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)SLOT * NREG, NULL, &e); CK(e);
  if (F('S')) { svm = clSVMAlloc(ctx, CL_MEM_READ_WRITE, (size_t)SLOT * NREG, 0); if (!svm) { fprintf(stderr, "clSVMAlloc failed\n"); exit(7); } }
  for (int i = 0; i < NREG; i++) { freelist[nfree++] = i; if (F('e')) subs[i] = sub(parent, (size_t)i * SLOT, SLOT); if (F('B')) { subs[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, SLOT, NULL, &e); CK(e); }
    if (F('R')) { stock[i] = malloc(STOCK * sizeof(cl_mem)); for (int j = 0; j < STOCK; j++) stock[i][nstock[i]++] = sub(parent, (size_t)i * SLOT, SLOT); } }
  pthread_t th[64];
  for (long t = 0; t < threads; t++) pthread_create(&th[t], NULL, worker, (void *)t);
  pthread_t bt; if (F('P')) pthread_create(&bt, NULL, builder, NULL);
  for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
  running = 0; if (F('P')) pthread_join(bt, NULL);
  printf("%s: flags %s threads %d rounds %d ok\n", name, flags, threads, rounds);
  return 0;
}

// Raw-OpenCL reduction of the NVIDIA driver crash in crates/xpu-kernel/tests/shared_stream_threads.rs
// (docs/performance.md, 2026-12-03 13:00 UTC). Build: gcc -O2 nvidia_subbuffer_repro.c -lOpenCL -lpthread
// On the H200 (driver 580): modes "a", "ap" and "bp" crashed 3 of 3 runs, mode "b" passed 3 of 3.
// xpu-like block reuse across threads on one in-order queue: regions of one parent buffer are handed out
// from a shared free list; a thread frees its input region right after enqueueing the kernel that reads it,
// and releases that region's sub-buffer AFTER (flag a) or BEFORE (flag b) returning the region to the list.
// usage: pool FLAGS THREADS ROUNDS ; FLAGS: a|b (order), p writes/reads via the parent at the region's offset (else the sub-buffer)
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static cl_context ctx; static cl_device_id dev; static cl_command_queue q; static cl_program prog; static cl_mem parent;
static const char *flags; static int rounds;
#define F(c) (strchr(flags, c) != NULL)
#define CK(x) do { cl_int e_ = (x); if (e_) { fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(3); } } while (0)
static const char *SRC = "__kernel void add1(__global float *y, __global const float *x, uint n) { size_t i = get_global_id(0); if (i < n) y[i] = x[i] + 1.0f; }";
#define SLOT 4096
#define NREG 64
static pthread_mutex_t pl = PTHREAD_MUTEX_INITIALIZER; static int freelist[NREG]; static int nfree;
static int take(void) { pthread_mutex_lock(&pl); if (!nfree) { fprintf(stderr, "pool empty\n"); exit(5); } int r = freelist[--nfree]; pthread_mutex_unlock(&pl); return r; }
static void give(int r) { pthread_mutex_lock(&pl); freelist[nfree++] = r; pthread_mutex_unlock(&pl); }
static cl_mem sub(cl_mem p, size_t off, size_t size) { cl_buffer_region r = { off, size }; cl_int e; cl_mem m = clCreateSubBuffer(p, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &e); CK(e); return m; }
static void *worker(void *arg) {
  long t = (long)arg; cl_int e;
  cl_kernel k = clCreateKernel(prog, "add1", &e); CK(e);
  float host[1024], got[1024];
  for (int r = 0; r < rounds; r++) {
    unsigned n = 1 + (t * 131 + r * 17) % 700;
    for (unsigned i = 0; i < n; i++) host[i] = (float)(t + r + i);
    int rx = take(), ry = take();
    cl_mem x = sub(parent, (size_t)rx * SLOT, 4 * n);
    cl_event ev;
    if (F('p')) CK(clEnqueueWriteBuffer(q, parent, CL_FALSE, (size_t)rx * SLOT, 4 * n, host, 0, NULL, &ev));
    else CK(clEnqueueWriteBuffer(q, x, CL_FALSE, 0, 4 * n, host, 0, NULL, &ev));
    cl_mem y = sub(parent, (size_t)ry * SLOT, 4 * n);
    CK(clSetKernelArg(k, 0, sizeof y, &y)); CK(clSetKernelArg(k, 1, sizeof x, &x)); CK(clSetKernelArg(k, 2, 4, &n));
    size_t g = n; cl_event kev; CK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, &kev)); CK(clReleaseEvent(kev));
    if (F('b')) { CK(clReleaseMemObject(x)); give(rx); } else { give(rx); CK(clReleaseMemObject(x)); }
    cl_event rev;
    if (F('p')) CK(clEnqueueReadBuffer(q, parent, CL_FALSE, (size_t)ry * SLOT, 4 * n, got, 0, NULL, &rev));
    else CK(clEnqueueReadBuffer(q, y, CL_FALSE, 0, 4 * n, got, 0, NULL, &rev));
    CK(clWaitForEvents(1, &rev)); CK(clReleaseEvent(rev)); CK(clWaitForEvents(1, &ev)); CK(clReleaseEvent(ev));
    if (F('b')) { CK(clReleaseMemObject(y)); give(ry); } else { give(ry); CK(clReleaseMemObject(y)); }
    for (unsigned i = 0; i < n; i++) if (got[i] != host[i] + 1.0f) { fprintf(stderr, "bad value t%ld r%d i%u\n", t, r, i); exit(4); }
  }
  CK(clReleaseKernel(k));
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
  q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &e); CK(e);
  prog = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &e); CK(e); CK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
  parent = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)SLOT * NREG, NULL, &e); CK(e);
  for (int i = 0; i < NREG; i++) freelist[nfree++] = i;
  pthread_t th[64];
  for (long t = 0; t < threads; t++) pthread_create(&th[t], NULL, worker, (void *)t);
  for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
  printf("%s: flags %s threads %d rounds %d ok\n", name, flags, threads, rounds);
  return 0;
}

/* The fake CUDA table's devices, threads and contexts (tests/fake_cuda/fake_cuda.c holds the
 * memory, streams, events and IPC handles; this part shares nothing with their state but the
 * current device it hands them, tests/fake_cuda/fake_int.h). Each rule names the CUDA
 * documentation it encodes.
 *
 * Devices and threads (cudaSetDevice, cudaGetDevice; PG, "Initialization", "Device
 * Selection").
 *   - The fake has several devices (RR_TEST_FAKE_DEVICES; the tests default to 2).
 *   - The current device belongs to the calling thread: cudaSetDevice on one thread leaves
 *     every other thread where it was. A thread that never called cudaSetDevice is on
 *     device 0: in the runtime, a thread with no current context is given the primary context
 *     of device 0 by the first call that needs one.
 * Contexts (PG, "Initialization"; cudaSetDevice since CUDA 12.0).
 *   - cudaSetDevice creates the device's primary context at once; so does any call that
 *     needs one (allocation, streams, events, copies, launches, waits and queries on events
 *     and streams) on the calling thread's current device. cudaGetDeviceCount,
 *     cudaGetDevice, pointer attributes and the primary-context state do not.
 *   - A context is the process's, one per device, made once: the fake records which call on
 *     which thread made it, and whether that thread had chosen its device or was on device 0
 *     by default (rr_fake_cuda_ctx_origin). A process whose buffers are all on device 1 and
 *     still has a context on device 0 paid for it (hundreds of MiB of GPU memory, and a
 *     failure in exclusive-process mode); the origin names the call that did it.
 * The legacy default stream (Runtime API, "Stream synchronization behavior").
 *   - NULL and cudaStreamLegacy name the legacy default stream of the calling thread's
 *     current device, whichever device the other arguments are on. fake_cuda.c resolves them
 *     so; a stream wait for an event of one device put on another device's legacy stream is
 *     legal, but it is what a caller's NULL stream becomes when it is used on a thread whose
 *     current device is not the caller's: the stream the caller meant is not ordered. Each
 *     such wait is counted and the first one described (rr_fake_cuda_legacy_cross).
 *   - A process forked after the parent used CUDA cannot use it (cudaErrorInitializationError;
 *     PG, "Initialization").
 *
 * Threads are numbered in the order they first call the fake in a process (1, 2, ...). */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/api.h"
#include "tests/fake_cuda/fake_cuda.h"
#include "tests/fake_cuda/fake_int.h"

#define FD_MAX_DEV 8
#define FD_TEXT 192

static struct {
  int ndev;
  _Atomic int pid; /* the process that started the fake driver */
  atomic_int next_thread;
  pthread_mutex_t mu; /* the records below */
  atomic_uchar ctx[FD_MAX_DEV];
  char ctx_origin[FD_MAX_DEV][FD_TEXT];
  int cross; /* stream waits on one device's legacy stream for another device's event */
  char cross_first[FD_TEXT];
} D = {.mu = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local int t_dev;    /* the current device: 0 until cudaSetDevice */
static _Thread_local int t_chose;  /* this thread called cudaSetDevice */
static _Thread_local int t_number; /* 0: not numbered yet */
static _Thread_local int t_err;    /* the thread's last error (cudaGetLastError) */

int rr__fk_fail(int e) {
  t_err = e;
  return e;
}

int rr__fk_device(void) {
  return t_dev;
}

static int fd_thread(void) {
  if (!t_number) t_number = atomic_fetch_add(&D.next_thread, 1) + 1;
  return t_number;
}

int rr__fk_init(void) {
  (void)fd_thread();
  int me = (int)getpid(), seen = 0;
  if (atomic_compare_exchange_strong(&D.pid, &seen, me) || seen == me) return 0;
  /* PG, "Initialization": CUDA state does not survive fork. A forked child has its own fake
   * only when the parent never used it. */
  return rr__fk_fail(RR__CUDA_ERR_INITIALIZATION);
}

/* Make device d's primary context if it has none, recording who did. */
static void fd_make_ctx(int d, const char *call) {
  if (atomic_load(&D.ctx[d])) return;
  pthread_mutex_lock(&D.mu);
  if (!atomic_load(&D.ctx[d])) {
    snprintf(D.ctx_origin[d], FD_TEXT, "%s on thread %d, %s", call, fd_thread(),
             t_chose ? "which had chosen its device (cudaSetDevice)"
                     : "which never called cudaSetDevice (on device 0 by default)");
    atomic_store(&D.ctx[d], 1);
  }
  pthread_mutex_unlock(&D.mu);
}

int rr__fk_ctx(const char *call) {
  int e = rr__fk_init();
  if (e) return e;
  fd_make_ctx(t_dev, call);
  return 0;
}

void rr__fk_legacy_cross(const char *call, int stream_device, int event_device) {
  pthread_mutex_lock(&D.mu);
  if (D.cross++ == 0)
    snprintf(D.cross_first, FD_TEXT,
             "%s(NULL / cudaStreamLegacy) on thread %d: device %d's legacy stream waits for an "
             "event of device %d",
             call, fd_thread(), stream_device, event_device);
  pthread_mutex_unlock(&D.mu);
}

/* ---- the table's entries ---- */

int rr__fk_device_count(int *n) {
  int e = rr__fk_init();
  if (e) return e;
  *n = D.ndev;
  return 0;
}

int rr__fk_get_device(int *d) {
  int e = rr__fk_init();
  if (e) return e;
  *d = t_dev;
  return 0;
}

int rr__fk_set_device(int d) {
  int e = rr__fk_init();
  if (e) return e;
  if (d < 0 || d >= D.ndev) return rr__fk_fail(RR__CUDA_ERR_INVALID_DEVICE);
  t_dev = d;
  t_chose = 1;
  /* Since CUDA 12.0 cudaSetDevice initialises the device's primary context at once. */
  char call[32];
  snprintf(call, sizeof call, "cudaSetDevice(%d)", d);
  fd_make_ctx(d, call);
  return 0;
}

int rr__fk_primary_ctx_active(int d, int *active) {
  int e = rr__fk_init();
  if (e) return e;
  if (d < 0 || d >= D.ndev) return rr__fk_fail(RR__CUDA_ERR_INVALID_DEVICE);
  *active = atomic_load(&D.ctx[d]);
  return 0;
}

void rr__fk_clear_error(void) {
  t_err = 0;
}

int rr__fk_setup(int devices) {
  D.ndev = devices < 1 ? 1 : devices > FD_MAX_DEV ? FD_MAX_DEV : devices;
  return D.ndev;
}

/* A UUID per fake device, the same in every process of the test (each sees the same GPUs
 * in the same order: no CUDA_VISIBLE_DEVICES here). */
int rr__fk_device_uuid(int d, unsigned char uuid[16]) {
  int e = rr__fk_init();
  if (e) return e;
  if (d < 0 || d >= D.ndev) return rr__fk_fail(RR__CUDA_ERR_INVALID_DEVICE);
  memset(uuid, 0, 16);
  memcpy(uuid, "RRFAKEGPU", 9);
  uuid[15] = (unsigned char)d;
  return 0;
}

/* ---- peer access and IPC support (issue: CUDA IPC chosen without checking it) ----
 *
 * cudaDeviceCanAccessPeer: different fake devices can access each other, unless
 * RR_FAKE_CUDA_NO_P2P=1 (GPUs on different PCIe root complexes, or without a P2P link: the
 * answer is 0 both ways). Asking about a device and itself is refused here (stricter than
 * the runtime, whose answer for that pair the documentation does not give: the library has
 * no reason to ask it).
 *
 * cudaIpcOpenMemHandle maps the exporter's memory "into the current device address space"
 * and, between different devices, enables peer access as cudaDeviceEnablePeerAccess would;
 * the documentation says cudaDeviceCanAccessPeer tells whether that mapping is possible.
 * Where it is not, the runtime answers cudaErrorPeerAccessUnsupported ("peer access is not
 * supported between these two devices": what TensorRT-LLM issue 1498 shows
 * cudaIpcOpenMemHandle returning on such GPUs). The fake refuses such an open with it.
 *
 * RR_FAKE_CUDA_NO_IPC=1: a device without CUDA IPC (a MIG instance: "CUDA IPC is not
 * supported between MIG instances", MIG User Guide; WSL: the cudaIpc* calls are not
 * supported there, CUDA on WSL User Guide): cudaIpcGetMemHandle fails with
 * cudaErrorNotSupported. Which code a MIG instance really returns is not verified here. */
static int fk_env_on(const char *name) {
  const char *v = getenv(name);
  return v && !strcmp(v, "1");
}

int rr__fk_can_access_peer(int *can, int d, int peer) {
  *can = 0;
  int e = rr__fk_init();
  if (e) return e;
  if (d < 0 || d >= D.ndev || peer < 0 || peer >= D.ndev || d == peer)
    return rr__fk_fail(RR__CUDA_ERR_INVALID_DEVICE);
  *can = !fk_env_on("RR_FAKE_CUDA_NO_P2P");
  return 0;
}

int rr__fk_ipc_open_check(int exporter) {
  const int importer = rr__fk_device();
  if (exporter != importer && fk_env_on("RR_FAKE_CUDA_NO_P2P"))
    return rr__fk_fail(RR__CUDA_ERR_NO_PEER);
  return 0;
}

int rr__fk_ipc_get_check(void) {
  return fk_env_on("RR_FAKE_CUDA_NO_IPC") ? rr__fk_fail(RR__CUDA_ERR_NOT_SUPPORTED) : 0;
}

/* ---- errors: the runtime's names and texts of the codes the fake returns ---- */

const char *rr__fk_error_name(int e) {
  switch (e) {
    case 0:
      return "cudaSuccess";
    case RR__CUDA_ERR_INVALID_VALUE:
      return "cudaErrorInvalidValue";
    case RR__CUDA_ERR_MEMORY_ALLOCATION:
      return "cudaErrorMemoryAllocation";
    case RR__CUDA_ERR_INITIALIZATION:
      return "cudaErrorInitializationError";
    case RR__CUDA_ERR_NO_DEVICE:
      return "cudaErrorNoDevice";
    case RR__CUDA_ERR_INVALID_DEVICE:
      return "cudaErrorInvalidDevice";
    case RR__CUDA_ERR_DEVICE_UNINITIALIZED:
      return "cudaErrorDeviceUninitialized";
    case RR__CUDA_ERR_MAP_FAILED:
      return "cudaErrorMapBufferObjectFailed";
    case RR__CUDA_ERR_NO_PEER:
      return "cudaErrorPeerAccessUnsupported";
    case RR__CUDA_ERR_INVALID_HANDLE:
      return "cudaErrorInvalidResourceHandle";
    case RR__CUDA_ERR_NOT_READY:
      return "cudaErrorNotReady";
    case RR__CUDA_ERR_ILLEGAL_STATE:
      return "cudaErrorIllegalState";
    case RR__CUDA_ERR_CAPTURE_UNSUPPORTED:
      return "cudaErrorStreamCaptureUnsupported";
    case RR__CUDA_ERR_CAPTURE_UNMATCHED:
      return "cudaErrorStreamCaptureUnmatched";
    case RR__CUDA_ERR_CAPTURE_UNJOINED:
      return "cudaErrorStreamCaptureUnjoined";
    case RR__CUDA_ERR_CAPTURED_EVENT:
      return "cudaErrorCapturedEvent";
    case E_LAUNCH_FAILED:
      return "cudaErrorLaunchFailure";
    case RR__CUDA_ERR_LAUNCH_TIMEOUT:
      return "cudaErrorLaunchTimeout";
    case RR__CUDA_ERR_HOST_REGISTERED:
      return "cudaErrorHostMemoryAlreadyRegistered";
    case RR__CUDA_ERR_NOT_SUPPORTED:
      return "cudaErrorNotSupported";
  }
  return "cudaErrorUnknown";
}

const char *rr__fk_error_string(int e) {
  switch (e) {
    case 0:
      return "no error";
    case RR__CUDA_ERR_INVALID_VALUE:
      return "invalid argument";
    case RR__CUDA_ERR_MEMORY_ALLOCATION:
      return "out of memory";
    case RR__CUDA_ERR_INITIALIZATION:
      return "initialization error";
    case RR__CUDA_ERR_INVALID_DEVICE:
      return "invalid device ordinal";
    case RR__CUDA_ERR_DEVICE_UNINITIALIZED:
      return "invalid device context";
    case RR__CUDA_ERR_MAP_FAILED:
      return "mapping of buffer object failed";
    case RR__CUDA_ERR_NO_PEER:
      return "peer access is not supported between these two devices";
    case RR__CUDA_ERR_INVALID_HANDLE:
      return "invalid resource handle";
    case RR__CUDA_ERR_NOT_READY:
      return "device not ready";
    case RR__CUDA_ERR_ILLEGAL_STATE:
      return "the operation cannot be performed in the present state";
    case RR__CUDA_ERR_CAPTURE_UNSUPPORTED:
      return "operation not permitted when stream is capturing";
    case RR__CUDA_ERR_CAPTURE_UNMATCHED:
      return "capture was not initiated in this stream";
    case RR__CUDA_ERR_CAPTURE_UNJOINED:
      return "capturing stream has unjoined work";
    case RR__CUDA_ERR_CAPTURED_EVENT:
      return "operation not permitted on an event last recorded in a capturing stream";
    case E_LAUNCH_FAILED:
      return "unspecified launch failure";
    case RR__CUDA_ERR_LAUNCH_TIMEOUT:
      return "the launch timed out and was terminated";
    case RR__CUDA_ERR_HOST_REGISTERED:
      return "part or all of the requested memory range is already mapped";
    case RR__CUDA_ERR_NOT_SUPPORTED:
      return "operation not supported";
  }
  return "unknown error";
}

/* ---- what tests ask ---- */

int rr_fake_cuda_ctx_origin(int device, char *buf, size_t n) {
  if (n) buf[0] = 0;
  if (device < 0 || device >= FD_MAX_DEV || !atomic_load(&D.ctx[device])) return 0;
  pthread_mutex_lock(&D.mu);
  if (n) snprintf(buf, n, "%s", D.ctx_origin[device]);
  pthread_mutex_unlock(&D.mu);
  return 1;
}

int rr_fake_cuda_legacy_cross(char *buf, size_t n) {
  pthread_mutex_lock(&D.mu);
  int c = D.cross;
  if (n) snprintf(buf, n, "%s", c ? D.cross_first : "");
  pthread_mutex_unlock(&D.mu);
  return c;
}

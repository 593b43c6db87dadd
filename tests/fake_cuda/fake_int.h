/* What the two halves of the fake CUDA table share (tests only): fake_devices.c keeps the
 * devices, the calling thread's current device, the contexts and the last error;
 * fake_cuda.c the memory, streams, events and IPC handles, which ask it for the current
 * device and a context before each call that needs one. */
#ifndef RR_TESTS_FAKE_INT_H_
#define RR_TESTS_FAKE_INT_H_

#define E_LAUNCH_FAILED 719 /* cudaErrorLaunchFailure: a kernel given host memory */

/* Set the thread's last error to e and return it. */
int rr__fk_fail(int e);
/* Start the "driver" in this process; refuse a child forked after the parent used it. */
int rr__fk_init(void);
/* A call that needs a context (its CUDA name): starts the driver and the context of the
 * calling thread's current device, recording who made it. */
int rr__fk_ctx(const char *call);
/* The calling thread's current device (0 until it calls cudaSetDevice). */
int rr__fk_device(void);
/* A stream wait for an event of event_device was put on stream_device's legacy stream. */
void rr__fk_legacy_cross(const char *call, int stream_device, int event_device);
/* The number of devices, bounded to 1..8; returned. */
int rr__fk_setup(int devices);

/* The GPUs every process of a test shares (fake_gpu.c): made at install, before any fork. A
 * device operation runs between enter and leave, which wait for the device to be this
 * process's (one context at a time). */
void rr__fk_gpu_setup(void);
void rr__fk_gpu_enter(int device);
void rr__fk_gpu_leave(int device);
long rr__fk_watchdog_ms(void);
/* The process's sticky error (0: none): set once by a kernel the watchdog ended. */
int rr__fk_sticky(void);
void rr__fk_set_sticky(int e);
/* The errors' names and texts (fake_devices.c). */
const char *rr__fk_error_name(int e);
const char *rr__fk_error_string(int e);

/* Table entries. */
int rr__fk_device_count(int *n);
int rr__fk_get_device(int *d);
int rr__fk_set_device(int d);
int rr__fk_primary_ctx_active(int d, int *active);
void rr__fk_clear_error(void);
int rr__fk_device_uuid(int d, unsigned char uuid[16]);
int rr__fk_can_access_peer(int *can, int d, int peer);
/* IPC's limits (fake_devices.c): an open on the calling thread's device of memory exported
 * on `exporter` (peer access, RR_FAKE_CUDA_NO_P2P), and a handle's export
 * (RR_FAKE_CUDA_NO_IPC). 0 or the error, set as the thread's last. */
int rr__fk_ipc_open_check(int exporter);
int rr__fk_ipc_get_check(void);

#endif

/* What the two halves of the fake CUDA table share (tests only): fake_devices.c keeps the
 * devices, the calling thread's current device, the contexts and the last error;
 * fake_cuda.c the memory, streams, events and IPC handles, which ask it for the current
 * device and a context before each call that needs one. */
#ifndef RR_TESTS_FAKE_INT_H_
#define RR_TESTS_FAKE_INT_H_

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

/* Table entries. */
int rr__fk_device_count(int *n);
int rr__fk_get_device(int *d);
int rr__fk_set_device(int d);
int rr__fk_primary_ctx_active(int d, int *active);
void rr__fk_clear_error(void);

#endif

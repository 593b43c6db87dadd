/* The state the fake CUDA table's parts share (tests only): the allocation registry, the
 * streams and their operations, the events, under one lock (F.mu). fake_cuda.c owns it and
 * runs the streams; fake_ipc.c (IPC handles) and fake_memops.c (stream memory operations,
 * registered host memory, the allocations' ranges, the one-kernel launch) add entries that
 * read and write it under the same lock. */
#ifndef RR_TESTS_FAKE_STATE_H_
#define RR_TESTS_FAKE_STATE_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "cuda/api.h"
#include "tests/fake_cuda/fake_int.h"

#define F_MAX_DEV 8
#define F_MAGIC 0x4b414652u /* "RFAK" */

typedef struct falloc {
  char *base;   /* what the caller sees (PROT_NONE for device memory) */
  char *shadow; /* readable and writable view (== base for host-readable kinds) */
  size_t bytes; /* mapped length */
  int type;     /* RR__CUDA_MEM_* */
  int device;
  int fd;           /* memfd of device memory, else -1 */
  pid_t from_pid;   /* IPC-opened: the exporter */
  uint64_t from_id; /* IPC-opened: the exporter's allocation id */
  int refs;         /* IPC-opened: opens not yet closed */
  /* Registered host memory (cudaHostRegister): the caller's own pages (never unmapped here),
   * and its device pointer, a PROT_NONE reservation of its own that stream memory operations
   * translate to those pages (devmap). noexport: device memory with no IPC handle. vmm: as
   * noexport, and its BUFFER_ID is 0 (VMM memory, rr_fake_cuda_malloc_vmm). */
  int registered, devmap, noexport, vmm;
  int exported; /* device memory whose IPC handle was taken (cudaIpcGetMemHandle) */
  uint64_t id;
  struct falloc *next;
} falloc;

typedef struct fevshm {      /* an event's state; in a memfd when interprocess */
  _Atomic uint64_t recorded; /* records issued */
  _Atomic uint64_t done;     /* highest record completed */
} fevshm;

typedef struct fevent {
  uint32_t magic;
  unsigned flags;
  int device;
  fevshm *sh;
  int fd;                /* interprocess: the memfd of sh */
  int ipc_opened;        /* opened from another process's handle */
  int refs;              /* the handle, and each queued operation that reads sh (F.mu) */
  struct fstream *rec_s; /* local events: the stream and position of the last record */
  uint64_t rec_seq;
  struct fstream *captured; /* the last record was made in this capturing stream, or NULL */
} fevent;

struct fstream;
typedef struct fdep {
  struct fstream *s; /* wait until s->done >= seq ... */
  uint64_t seq;
  fevshm *ev; /* ... or until ev->done >= gen */
  uint64_t gen;
  _Atomic uint32_t *word; /* ... or until the word compares true (a stream memory wait) */
  uint32_t value;
  int cmp;
} fdep;

enum {
  OP_COPY,
  OP_SET,
  OP_REDUCE,
  OP_DDP,
  OP_RECORD,
  OP_WAIT,
  OP_WAITV,
  OP_WRITEV,
  OP_SPIN,
  OP_DIRECT
};

typedef struct fop {
  int kind;
  void *dst, *dst2;
  const void *a, *b;
  size_t n;
  int dtype, op, div, ddp_kind, wire, world, value;
  fevshm *ev;
  _Atomic uint32_t *word; /* OP_WRITEV / OP_SPIN: the word (readable view), its value */
  uint32_t uval;
  rr__cuda_direct *direct; /* OP_DIRECT: its tasks, pointers translated (owned) */
  struct fevent *hold;     /* an event this operation keeps alive until it ran */
  uint64_t gen, seq;
  fdep *deps;
  int ndeps;
  struct fop *next;
} fop;

typedef struct fstream {
  uint32_t magic;
  int device, nonblocking, legacy, dead;
  pthread_t th;
  fop *head, *tail;
  uint64_t enq, done;
  /* Graph capture: the stream that began the capture this stream takes part in (itself for
   * that one, NULL: not capturing), and, for a stream that joined by waiting on an event of
   * the capture, whether it still has to be joined back (the origin waiting on an event
   * recorded in it) before the capture may end. */
  struct fstream *cap;
  int unjoined;
  struct fstream *next;
} fstream;

typedef struct fstate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  long delay_us; /* set at install, before any thread */
  int ptr_fail;  /* RR_FAKE_CUDA_PTR_FAIL: pointer attributes fail (set at install) */
  int no_memops; /* RR_FAKE_CUDA_NO_MEMOPS: devices without stream memory operations */
  /* Device ranges freed last, handed out again first (the runtime reuses freed addresses;
   * a cache keyed by address must be caught). */
  struct {
    char *base;
    size_t bytes;
  } freed[8];
  uint64_t next_id;
  falloc *allocs;
  fstream *streams;
  fstream *legacy[F_MAX_DEV];
} fstate;
extern fstate F;

#define fail rr__fk_fail

/* A call that needs a context on the calling thread's current device (fake_devices.c). */
static inline int f_ctx(const char *call) {
  return rr__fk_ctx(call);
}

/* fake_cuda.c: the registry, the streams, the launch checks (F.mu held where they say). */
falloc *f_find(const void *p);
void *f_xlate(const void *p, size_t n, int *type);
size_t f_round(size_t b);
int f_map_device(int fd, size_t bytes, char **base, char **shadow);
falloc *f_register(char *base, char *shadow, size_t bytes, int type, int device, int fd);
void f_unregister(falloc *a);
void f_drain_locked(void);
void f_wait_locked(void); /* sleep on F.cv, 100 us at most (interprocess work is not signalled) */
fstream *f_stream(void *h, int *err);
fop *f_op(int kind);
int f_enqueue(fstream *s, fop *o, const fdep *extra);
int f_launch(fop *o, void *stream, const char **what);
void *f_kernel_ptr(const void *p, size_t bytes, int *bad);
fevent *f_event(void *h);
int f_alloc(void **p, size_t bytes, int type);
void f_event_unref(struct fevent *ev);
int f_compare(uint32_t w, uint32_t v, int cmp);

/* The table's entries from fake_events.c, fake_ipc.c and fake_memops.c. */
int f_event_create(void **event, unsigned flags);
int f_event_destroy(void *event);
int f_event_record(void *event, void *stream);
int f_stream_wait_event(void *stream, void *event);
int f_event_sync(void *event);
int f_event_query(void *event);
int f_ipc_get_mem_handle(rr__cuda_ipc_handle *out, void *p);
/* cudaFree of exported memory (F.mu held): counts a free while another process maps it. */
void f_ipc_freeing(const falloc *a);
int f_ipc_open_mem_handle(void **p, const rr__cuda_ipc_handle *in);
int f_ipc_close_mem_handle(void *p);
int f_ipc_get_event_handle(rr__cuda_ipc_handle *out, void *event);
int f_ipc_open_event_handle(void **event, const rr__cuda_ipc_handle *in);
int f_wait_value32(void *stream, void *addr, unsigned value, unsigned flags);
int f_write_value32(void *stream, void *addr, unsigned value, unsigned flags);
int f_mem_ops(int device, int *ok);
int f_host_register(void *p, size_t bytes);
int f_host_unregister(void *p);
int f_host_device_ptr(void **dptr, void *p);
int f_ptr_range(const void *p, void **base, size_t *bytes, unsigned long long *id);
int f_direct_launch(const rr__cuda_direct *d, void *stream, const char **what);

#endif

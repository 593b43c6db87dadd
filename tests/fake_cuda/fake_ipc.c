/* The fake CUDA table's IPC handles (tests only; the state is fake_cuda.c's, fake_state.h).
 *
 * IPC handles (cudaIpcGetMemHandle, cudaIpcOpenMemHandle, cudaIpcCloseMemHandle,
 * cudaIpcOpenEventHandle).
 *   - A handle is for the base of a device allocation.
 *   - Opening a handle in the process that exported it fails (the documentation says the
 *     handle comes "from another process"; the runtime answers cudaErrorDeviceUninitialized,
 *     "invalid device context"; test_cuda ipc, tests/gpu/run.sh's probe step, checks the
 *     real runtime).
 *   - Opening the same handle twice in one process returns the same pointer and counts
 *     references; cudaIpcCloseMemHandle unmaps at the last close.
 *   - "Calling cudaFree on an exported memory region before calling cudaIpcCloseMemHandle in
 *     the importing context will result in undefined behavior" (cudaIpcOpenMemHandle): a
 *     cudaFree of exported memory that another live process still maps (its /proc/PID/maps
 *     names the allocation's memfd) is counted (rr_fake_cuda_free_violations) and reported
 *     on stderr; the memory stays mapped there (a GPU promises nothing).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/dtype.h"
#include "cuda/cuda.h"
#include "tests/fake_cuda/fake_cuda.h"
#include "tests/fake_cuda/fake_state.h"

/* ---- IPC ---- */

typedef struct fhandle { /* the 64 bytes of a fake IPC handle */
  uint32_t magic;
  uint32_t is_event;
  int32_t pid, fd, device;
  uint32_t pad;
  uint64_t bytes, id;
} fhandle;
_Static_assert(sizeof(fhandle) <= sizeof(rr__cuda_ipc_handle), "fake handle fits");

static int f_open_fd(const fhandle *h) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
  return open(path, O_RDWR | O_CLOEXEC);
}

static atomic_int f_free_violations;

int rr_fake_cuda_free_violations(void) {
  return atomic_load(&f_free_violations);
}

/* Does another process map the memfd fd? */
static int f_mapped_elsewhere(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return 0;
  DIR *d = opendir("/proc");
  if (!d) return 0;
  int found = 0;
  char path[64], line[512];
  for (struct dirent *e; !found && (e = readdir(d));) {
    const int pid = atoi(e->d_name);
    if (pid <= 0 || pid == (int)getpid()) continue;
    snprintf(path, sizeof path, "/proc/%d/maps", pid);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    while (!found && fgets(line, sizeof line, f)) {
      unsigned long long ino = 0;
      if (!strstr(line, "memfd:")) continue;
      if (sscanf(line, "%*s %*s %*s %*s %llu", &ino) == 1 && ino == (unsigned long long)st.st_ino)
        found = pid;
    }
    fclose(f);
  }
  closedir(d);
  return found;
}

void f_ipc_freeing(const falloc *a) {
  if (!a->exported || a->fd < 0) return;
  const int pid = f_mapped_elsewhere(a->fd);
  if (!pid) return;
  atomic_fetch_add(&f_free_violations, 1);
  fprintf(stderr,
          "fake cuda: pid %d: cudaFree of exported memory (%zu bytes) that pid %d still maps "
          "(cudaIpcOpenMemHandle: undefined behavior)\n",
          (int)getpid(), a->bytes, pid);
}

int f_ipc_get_mem_handle(rr__cuda_ipc_handle *out, void *p) {
  int e = f_ctx("cudaIpcGetMemHandle");
  if (!e) e = rr__fk_ipc_get_check(); /* RR_FAKE_CUDA_NO_IPC: fake_devices.c */
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  falloc *a = f_find(p);
  /* cudaIpcGetMemHandle: the base of a device allocation made in this process. */
  if (!a || a->type != RR__CUDA_MEM_DEVICE || a->base != p || a->from_pid || a->noexport) {
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_INVALID_VALUE);
  }
  a->exported = 1;
  fhandle h = {.magic = F_MAGIC,
               .pid = (int32_t)getpid(),
               .fd = a->fd,
               .device = a->device,
               .bytes = a->bytes,
               .id = a->id};
  pthread_mutex_unlock(&F.mu);
  memset(out, 0, sizeof *out);
  memcpy(out->bytes, &h, sizeof h);
  return 0;
}

int f_ipc_open_mem_handle(void **p, const rr__cuda_ipc_handle *in) {
  *p = NULL;
  int e = f_ctx("cudaIpcOpenMemHandle");
  if (e) return e;
  fhandle h;
  memcpy(&h, in->bytes, sizeof h);
  if (h.magic != F_MAGIC || h.is_event) return fail(RR__CUDA_ERR_INVALID_VALUE);
  /* cudaIpcOpenMemHandle opens a handle "exported from another process": in the exporter
   * itself the runtime refuses it. */
  if (h.pid == (int32_t)getpid()) return fail(RR__CUDA_ERR_DEVICE_UNINITIALIZED);
  /* Another device's memory needs peer access (RR_FAKE_CUDA_NO_P2P: fake_devices.c). */
  e = rr__fk_ipc_open_check(h.device);
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  /* Opened already by this process: the same pointer, one more reference. */
  for (falloc *a = F.allocs; a; a = a->next)
    if (a->from_pid == h.pid && a->from_id == h.id) {
      a->refs++;
      *p = a->base;
      pthread_mutex_unlock(&F.mu);
      return 0;
    }
  int fd = f_open_fd(&h);
  char *base, *shadow;
  if (fd < 0 || f_map_device(fd, (size_t)h.bytes, &base, &shadow) != 0) {
    if (fd >= 0) close(fd);
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_MAP_FAILED);
  }
  falloc *a = f_register(base, shadow, (size_t)h.bytes, RR__CUDA_MEM_DEVICE, h.device, fd);
  if (!a) {
    munmap(base, (size_t)h.bytes), munmap(shadow, (size_t)h.bytes), close(fd);
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
  }
  a->from_pid = h.pid, a->from_id = h.id, a->refs = 1;
  *p = base;
  pthread_mutex_unlock(&F.mu);
  return 0;
}

int f_ipc_close_mem_handle(void *p) {
  int e = f_ctx("cudaIpcCloseMemHandle");
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  falloc *a = f_find(p);
  if (!a || a->base != p || !a->from_pid) {
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_INVALID_VALUE);
  }
  if (--a->refs == 0) {
    f_drain_locked(); /* work still queued on the mapping finishes first */
    f_unregister(a);
  }
  pthread_mutex_unlock(&F.mu);
  return 0;
}

int f_ipc_get_event_handle(rr__cuda_ipc_handle *out, void *event) {
  int e = f_ctx("cudaIpcGetEventHandle");
  if (e) return e;
  fevent *ev = f_event(event);
  /* cudaIpcGetEventHandle: only events created with cudaEventInterprocess and
   * cudaEventDisableTiming; others are an invalid resource handle. */
  if (!ev || !(ev->flags & RR__CUDA_EVENT_INTERPROCESS) || ev->ipc_opened)
    return fail(RR__CUDA_ERR_INVALID_HANDLE);
  fhandle h = {.magic = F_MAGIC,
               .is_event = 1,
               .pid = (int32_t)getpid(),
               .fd = ev->fd,
               .device = ev->device};
  memset(out, 0, sizeof *out);
  memcpy(out->bytes, &h, sizeof h);
  return 0;
}

int f_ipc_open_event_handle(void **event, const rr__cuda_ipc_handle *in) {
  *event = NULL;
  int e = f_ctx("cudaIpcOpenEventHandle");
  if (e) return e;
  fhandle h;
  memcpy(&h, in->bytes, sizeof h);
  if (h.magic != F_MAGIC || !h.is_event) return fail(RR__CUDA_ERR_INVALID_VALUE);
  /* cudaIpcOpenEventHandle: an event handle "exported from another process". */
  if (h.pid == (int32_t)getpid()) return fail(RR__CUDA_ERR_DEVICE_UNINITIALIZED);
  int fd = f_open_fd(&h);
  if (fd < 0) return fail(RR__CUDA_ERR_MAP_FAILED);
  fevshm *sh = mmap(NULL, f_round(sizeof(fevshm)), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (sh == MAP_FAILED) return fail(RR__CUDA_ERR_MAP_FAILED);
  fevent *ev = calloc(1, sizeof *ev);
  if (!ev) {
    munmap(sh, f_round(sizeof(fevshm)));
    return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
  }
  *ev = (fevent){.magic = F_MAGIC,
                 .flags = RR__CUDA_EVENT_INTERPROCESS | RR__CUDA_EVENT_DISABLE_TIMING,
                 .device = h.device,
                 .sh = sh,
                 .fd = -1,
                 .ipc_opened = 1,
                 .refs = 1};
  *event = ev;
  return 0;
}

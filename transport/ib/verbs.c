/* Loading libibverbs at run time: see verbs.h. */
#include "transport/ib/verbs.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/param.h"
#include "common/status.h"

static rr__ibv rr__ibv_table;
static int rr__ibv_status = RR_OK;
static char rr__ibv_why[512];
static pthread_once_t rr__ibv_once = PTHREAD_ONCE_INIT;

/* The static inlines of verbs.h, wrapped so that the table can hold them. Each dispatches
 * through the provider's ctx->ops exactly as a direct call in NCCL or Gloo would. */
static int rr__ibv_post_send_inl(struct ibv_qp *qp, struct ibv_send_wr *wr,
                                 struct ibv_send_wr **bad) {
  return ibv_post_send(qp, wr, bad);
}
static int rr__ibv_post_recv_inl(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                                 struct ibv_recv_wr **bad) {
  return ibv_post_recv(qp, wr, bad);
}
static int rr__ibv_poll_cq_inl(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  return ibv_poll_cq(cq, n, wc);
}
static int rr__ibv_req_notify_inl(struct ibv_cq *cq, int solicited_only) {
  return ibv_req_notify_cq(cq, solicited_only);
}

static void rr__ibv_do_load(void) {
  const char *lib = rr__params_get()->ib_library;
  if (!lib[0]) lib = "libibverbs.so.1";
  /* RTLD_LOCAL: the verbs symbols stay out of the global namespace of the process. */
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(rr__ibv_why, sizeof rr__ibv_why, "cannot load %s (%s): rdma-core is not installed?",
             lib, e ? e : "?");
    rr__ibv_status = RR_ENOTSUP;
    return;
  }
  rr__ibv *t = &rr__ibv_table;
  struct {
    const char *name;
    void **slot;
  } syms[] = {
#define RR__SYM(field) {"ibv_" #field, (void **)&t->field}
      RR__SYM(get_device_list),
      RR__SYM(free_device_list),
      RR__SYM(get_device_name),
      RR__SYM(open_device),
      RR__SYM(close_device),
      RR__SYM(query_device),
      RR__SYM(query_port),
      RR__SYM(query_gid),
      RR__SYM(alloc_pd),
      RR__SYM(dealloc_pd),
      RR__SYM(reg_mr),
      RR__SYM(dereg_mr),
      RR__SYM(create_comp_channel),
      RR__SYM(destroy_comp_channel),
      RR__SYM(create_cq),
      RR__SYM(destroy_cq),
      RR__SYM(get_cq_event),
      RR__SYM(ack_cq_events),
      RR__SYM(create_qp),
      RR__SYM(modify_qp),
      RR__SYM(destroy_qp),
#undef RR__SYM
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    dlerror();
    void *p = dlsym(h, syms[i].name);
    if (!p) {
      snprintf(rr__ibv_why, sizeof rr__ibv_why, "%s has no symbol %s", lib, syms[i].name);
      rr__ibv_status = RR_ENOTSUP;
      dlclose(h);
      return;
    }
    *syms[i].slot = p;
  }
  t->post_send = rr__ibv_post_send_inl;
  t->post_recv = rr__ibv_post_recv_inl;
  t->poll_cq = rr__ibv_poll_cq_inl;
  t->req_notify_cq = rr__ibv_req_notify_inl;
  /* The handle stays open for the life of the process: devices, queue pairs and memory
   * registrations made through it may outlive any one group. */
  RR__LOG_INFO(RR__SUB_INIT, "ib: loaded %s", lib);
}

int rr__ibv_load(const rr__ibv **out) {
  pthread_once(&rr__ibv_once, rr__ibv_do_load);
  if (rr__ibv_status != RR_OK) return rr__set_error(rr__ibv_status, "%s", rr__ibv_why);
  *out = &rr__ibv_table;
  return RR_OK;
}

const char *rr__ibv_wc_status(int s) {
  switch (s) {
    case IBV_WC_SUCCESS:
      return "success";
    case IBV_WC_LOC_LEN_ERR:
      return "local length error";
    case IBV_WC_LOC_QP_OP_ERR:
      return "local QP operation error";
    case IBV_WC_LOC_PROT_ERR:
      return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:
      return "work request flushed (the queue pair is in error)";
    case IBV_WC_REM_ACCESS_ERR:
      return "remote access error (bad rkey or bounds)";
    case IBV_WC_REM_OP_ERR:
      return "remote operation error";
    case IBV_WC_REM_INV_REQ_ERR:
      return "remote invalid request";
    case IBV_WC_RETRY_EXC_ERR:
      return "transport retry counter exceeded (peer unreachable)";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "receiver-not-ready retry counter exceeded";
    case IBV_WC_FATAL_ERR:
      return "fatal error";
    case IBV_WC_GENERAL_ERR:
      return "general error";
    default:
      return "error";
  }
}

/* The verbs calls the InfiniBand transport makes, as one table filled at run time.
 *
 * The library never links libibverbs: rr__ibv_load() dlopen()s "libibverbs.so.1" (or
 * RR_IB_LIBRARY, which the tests point at their fake, tests/fake_ib/) and resolves each
 * entry point by name, so one binary runs where rdma-core is missing (NCCL loads verbs the
 * same way, src/misc/ibvsymbols.cc). Types come from Debian's <infiniband/verbs.h>.
 *
 * Three calls of the data path, ibv_post_send, ibv_post_recv and ibv_poll_cq, plus
 * ibv_req_notify_cq, are not symbols of the library at all: verbs.h defines them as static
 * inline functions that jump through the provider's table in ctx->ops. The table wraps
 * those inlines (post_send etc. below), so they reach whatever filled ctx->ops: a hardware
 * provider behind the real library, or the fake's own functions. ibv_reg_mr and
 * ibv_query_port are macros in verbs.h that call the exported functions of the same name
 * by other routes; dlsym takes the exported symbols directly. */
#ifndef RR__TRANSPORT_IB_VERBS_H_
#define RR__TRANSPORT_IB_VERBS_H_

#include <infiniband/verbs.h>

typedef struct rr__ibv {
  struct ibv_device **(*get_device_list)(int *num);
  void (*free_device_list)(struct ibv_device **list);
  const char *(*get_device_name)(struct ibv_device *dev);
  struct ibv_context *(*open_device)(struct ibv_device *dev);
  int (*close_device)(struct ibv_context *ctx);
  int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
  int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
  int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
  int (*dealloc_pd)(struct ibv_pd *pd);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
  int (*dereg_mr)(struct ibv_mr *mr);
  struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
  int (*destroy_comp_channel)(struct ibv_comp_channel *ch);
  struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_ctx,
                              struct ibv_comp_channel *ch, int comp_vector);
  int (*destroy_cq)(struct ibv_cq *cq);
  int (*get_cq_event)(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx);
  void (*ack_cq_events)(struct ibv_cq *cq, unsigned int n);
  struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
  int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
  int (*destroy_qp)(struct ibv_qp *qp);
  /* The inlines of verbs.h, through ctx->ops (see the top). */
  int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
  int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
  int (*poll_cq)(struct ibv_cq *cq, int n, struct ibv_wc *wc);
  int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
} rr__ibv;

/* Load the library once per process. RR_OK with *out set, or an error whose text says why
 * (no library, a missing symbol); later calls return the same answer. */
int rr__ibv_load(const rr__ibv **out);
/* The name of a work completion status (ours: the fake need not export ibv_wc_status_str). */
const char *rr__ibv_wc_status(int status);

#endif /* RR__TRANSPORT_IB_VERBS_H_ */

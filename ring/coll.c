/* Running one call on this rank, the dispatcher above the algorithms: set up its context,
 * number it and write its header (its kind's row, ring/kind.h), pick its algorithm and run
 * it, describe it for logs and errors. The group (group/run.c) adds who failed and aborts
 * the group when a call fails. What the algorithms share is below them, in the primitives
 * (ring/prims.c, ring/pipe.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/param.h"
#include "common/status.h"
#include "common/util.h"
#include "ring/algo.h"
#include "ring/coll.h"
#include "ring/trace.h"

/* One rank: the result is the input (AVG over one rank divides by one). */
static int rr__local_copy(rr__coll *c) {
  const rr__args *a = c->a;
  if (!a->recvbuf) return RR_OK;
  return rr__coll_copy(c, a->recvbuf, a->sendbuf, a->count * c->esize);
}

void rr__coll_state_setup(rr__coll_state *cs) {
  const rr__params *p = rr__params_get();
  cs->seg_bytes = (size_t)p->seg_bytes;
  cs->ipc_seg_bytes = (size_t)p->ipc_seg_bytes;
  cs->nslots = (int)p->slots;
  cs->algo = rr__algo_by_name(p->algo);
  cs->small_bytes = (size_t)p->small_bytes;
  cs->trace = rr__trace_mode();
}

/* The algorithms, by kind (the run column of ring/kind.h's rows), and the others a kind
 * that chooses may run (RR__KIND_ALGO_MAP). */
static int (*const rr__kind_run[RR__K_END])(rr__coll *c) = {
#define RR__KIND_RUN(K, nm, wnm, fl, i, o, ip, al, fn, ...) [RR__K_##K] = fn,
    RR__KIND_MAP(RR__KIND_RUN)
#undef RR__KIND_RUN
};
static const struct {
  int kind, algo;
  int (*run)(rr__coll *c);
} rr__kind_algos[] = {
#define RR__KIND_ALGO(K, A, fn) {RR__K_##K, RR__ALGO_##A, fn},
    RR__KIND_ALGO_MAP(RR__KIND_ALGO)
#undef RR__KIND_ALGO
};

/* A kind that chooses (RR__KF_CHOOSE): RR_ALGO's, else recursive doubling up to
 * RR_SMALL_BYTES, else the row's. */
static int rr__choose(rr__coll *c, const rr__kind_info *k) {
  size_t bytes = c->a->count * c->esize;
  /* Recursive doubling takes whole steps, which only some memories run (device buffers
   * run pipelined steps only). */
  if (!(c->mem->caps & RR__MEM_WHOLE)) return k->algo;
  if (c->cs->algo != RR__ALGO_NONE) return c->cs->algo;
  return bytes <= c->cs->small_bytes ? RR__ALGO_RD : k->algo;
}

static int rr__dispatch(rr__coll *c) {
  const rr__args *a = c->a;
  const rr__kind_info *k = rr__kind(a->kind);
  int (*run)(rr__coll *) = a->kind >= 0 && a->kind < RR__K_END ? rr__kind_run[a->kind] : NULL;
  if (!run) return rr__set_error(RR_EINVAL, "internal: unknown call kind %d", a->kind);
  /* all_to_allv places its one block by displacement: its algorithm handles one rank. */
  if (c->n == 1 && !(k->flags & RR__KF_SOLO)) return rr__local_copy(c);
  for (size_t i = 0; i < RR__ARRAY_SIZE(rr__kind_algos); i++)
    if (rr__kind_algos[i].kind == a->kind && rr__kind_algos[i].algo == c->hdr.algo)
      return rr__kind_algos[i].run(c);
  return run(c);
}

/* The call's number and fingerprint, as its header will carry them. */
void rr__coll_begin(rr__coll *c) {
  const rr__args *a = c->a;
  rr__coll_state *cs = c->cs;
  rr__hdr *h = &c->hdr;
  const rr__kind_info *k = rr__kind(a->kind);
  memset(h, 0, sizeof *h);
  h->kind = (uint8_t)rr__kind_wire(a->kind);
  h->dtype = (uint8_t)a->dtype;
  h->op = (uint8_t)(k->flags & RR__KF_REDUCES ? a->op : 0);
  h->root = a->root;
  h->from = c->r;
  /* Ranks must agree on how device segments are handed over (ring/hdr.h). */
  h->handoff = c->dev && c->dev->memops ? RR__HDR_MEMOPS : RR__HDR_HOST;
  /* A call whose all-gather steps pull sends a description behind its header (ring/pipe_dev.c):
   * its ranks must agree (aux, which these kinds do not use otherwise). */
  if (c->dev && c->dev->pull) h->aux = RR__HDR_AUX_PULL;
  /* Only calls that cut data into segments need the same segment size on both sides. */
  if (k->in != RR__IO_NONE || k->out != RR__IO_NONE) h->seg_bytes = (uint32_t)c->seg_bytes;
  /* all_to_allv sets the count of each pair as its headers go and are checked. */
  h->count = k->in == RR__IO_DISPLS ? 0 : a->count;
  switch (k->seq) {
    case RR__SEQ_SENT:
      h->seq = cs->p2p_sent[a->peer]++;
      h->from = c->r;
      break;
    case RR__SEQ_RECVD:
      /* From any rank: the pair's number and the sender are known once a sender is chosen
       * (sendrecv.c); taking a number now would skip one of a pair that never sends. */
      if (a->peer == RR__PEER_ANY) break;
      h->seq = cs->p2p_recvd[a->peer]++;
      h->from = a->peer; /* what the sender's header will say */
      break;
    case RR__SEQ_HALVES: /* the sequence numbers are taken per half, by the algorithm */
      break;
    default:
      h->seq = cs->seq++;
      h->algo = k->flags & RR__KF_CHOOSE ? (uint8_t)rr__choose(c, k) : k->algo;
      if (!rr__algo(h->algo)->segs) h->seg_bytes = 0; /* whole messages: no segment size */
  }
}

/* One line naming the call, for logs and errors: built only when needed (a few hundred
 * nanoseconds of formatting on every small call otherwise). The kind's call column, or its
 * header's description; a receive from any rank says whether it has found its sender. */
const char *rr__coll_describe(const rr__coll *c, char *desc, size_t n) {
  const rr__args *a = c->a;
  const rr__kind_info *k = rr__kind(a->kind);
  if (a->peer == RR__PEER_ANY && c->any_src < 0)
    snprintf(desc, n, "recv from any rank (%zu x %s)", a->count, rr_dtype_name(a->dtype));
  else if (a->peer == RR__PEER_ANY)
    snprintf(desc, n, "recv from any rank (took rank %d's, #%llu of that pair, %zu x %s)",
             rr__grank(c, c->any_src), (unsigned long long)c->hdr.seq, a->count,
             rr_dtype_name(a->dtype));
  else if (k->call_desc) {
    const rr__kind_vals v = {.kind = rr__kind_name(a->kind),
                             .dtype = rr_dtype_name(a->dtype),
                             .seq = c->hdr.seq,
                             .count = a->count,
                             .recvcount = a->recvcount,
                             .peer = a->peer >= 0 ? rr__grank(c, a->peer) : -1,
                             .src = a->src >= 0 && a->src < c->n ? rr__grank(c, a->src) : -1};
    rr__kind_format(desc, n, k->call_desc, &v);
  } else
    rr__hdr_describe(&c->hdr, desc, n);
  return desc;
}

void rr__coll_set_seg(rr__coll *c, size_t seg_bytes) {
  c->seg_bytes = seg_bytes;
  c->seg = RR__MAX(seg_bytes / (c->esize ? c->esize : 1), 1);
}

void rr__coll_init(rr__coll *c, rr__coll_state *cs, rr__comm *cm, const rr__args *a, int rank,
                   int size, int64_t timeout_ms) {
  memset(c, 0, sizeof *c);
  c->cs = cs;
  c->cm = cm;
  c->a = a;
  c->n = size;
  c->r = rank;
  c->esize = rr_dtype_size(a->dtype);
  rr__coll_set_seg(c, cs->seg_bytes);
  c->timeout_ms = timeout_ms;
  c->deadline_ms = rr__deadline_coarse(timeout_ms);
  c->any_src = -1;
  c->mem = &rr__mem_host;
}

void rr__coll_on_device(rr__coll *c, const rr__req_dev *dev, int piped) {
  c->dev = dev;
  c->mem = piped ? &rr__mem_piped : dev->memops ? &rr__mem_memop : &rr__mem_ipc;
}

int rr__coll_exec(rr__coll *c) {
  rr__hdr_sends sends;
  sends.n = 0;
  c->sends = &sends;
  int coll = !rr__coll_is_p2p(c);
  rr__comm_new_call(c->cm, coll, c->hdr.seq);
  const int trace = c->cs->trace == RR__TRACE_FILE;
  if (trace) rr__trace_begin(c);
  int st = rr__dispatch(c);
  /* Wait until our headers left: their buffers live in this frame. */
  if (st == RR_OK) st = rr__coll_flush_hdrs(c);
  c->sends = NULL;
  if (st == RR_OK && coll) rr__comm_call_done(c->cm, c->hdr.seq);
  if (trace) rr__trace_end(c, st);
  return st;
}

/* rr_ddp_set_group: the wrapper moved to the group the survivors of a failure shrank to
 * (issue 26 item 3, docs/elastic.md "DDP"). Apart from ddp.c because it touches every part of
 * the wrapper's state once, outside the iteration: the works of the failed step, the
 * per-backward bookkeeping, the world-dependent scaling, the bucket layout and the
 * parameters. What it leaves is a wrapper as rr_ddp_init on newpg would make it, except that
 * the layout and the recorded gradient order are kept (agreed with newpg's rank 0), so a
 * group that already rebuilt its buckets does not record and rebuild again.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/util.h"
#include "ddp/ddp_internal.h"

/* Where the layout stands, as sent from newpg's rank 0. */
enum { RR__LAYOUT_RECORDING = 0, RR__LAYOUT_PENDING = 1, RR__LAYOUT_REBUILT = 2 };

/* Drop the step that failed: its all-reduces (revoked on the old group, so their waits return
 * at once with an error, which is the failure already being handled and is not reported
 * again) and its marks. The buckets' contents are garbage from here and are overwritten by
 * the next backward's copies in; the caller's gradients were never written. */
static void rr__ddp_drop_step(rr_ddp *d) {
  for (int b = 0; b < d->nbuckets; b++) {
    rr__ddp_bucket *k = &d->buckets[b];
    if (k->work) {
      (void)rr_work_wait(k->work, 0);
      rr_work_free(k->work);
      k->work = NULL;
    }
    k->launched = 0;
    k->pending = k->nparams;
  }
  memset(d->pready, 0, (size_t)d->nparams);
  d->next_launch = 0;
  d->nmarked = 0;
}

/* Agree on the bucket layout with newpg's rank 0: the all-reduces of the next backward match
 * only when every member has the same buckets in the same order. */
static int rr__ddp_agree_layout(rr_ddp *d) {
  int n = d->ntrainable;
  int32_t *msg = rr__calloc((size_t)n + 1, sizeof *msg);
  if (!msg) { /* the others are in the broadcast below: tell them, as any failure here */
    rr__set_error(RR_ENOMEM, "rank %d: rr_ddp_set_group: no memory for the bucket layout", d->rank);
    return rr__ddp_abort(d, RR_ENOMEM);
  }
  msg[0] = d->rebuilt           ? RR__LAYOUT_REBUILT
           : d->rebuild_pending ? RR__LAYOUT_PENDING
                                : RR__LAYOUT_RECORDING;
  for (int k = 0; k < n; k++) msg[k + 1] = d->ready_order[k];
  int st = rr_broadcast(d->pg, msg, msg, (size_t)n + 1, RR_INT32, d->root);
  if (st != RR_OK) {
    free(msg);
    rr__prefix_error(st, "rank %d: rr_ddp_set_group: broadcasting the bucket layout", d->rank);
    return rr__ddp_break(d, st);
  }
  int was_rebuilt = d->rebuilt, state = msg[0];
  if (state == RR__LAYOUT_RECORDING) {
    /* Rank 0 never finished a synchronised backward: everyone records afresh. A rank that
     * had rebuilt goes back to the construction layout. */
    d->recording = 1, d->nrecorded = 0, d->rebuild_pending = 0, d->rebuilt = 0;
    if (was_rebuilt) st = rr__ddp_make_buckets(d, NULL);
  } else {
    for (int k = 0; k < n; k++) d->ready_order[k] = msg[k + 1];
    d->recording = 0, d->nrecorded = n;
    if (state == RR__LAYOUT_PENDING) { /* the rebuild happens at the next forward, as planned */
      d->rebuild_pending = !d->opt.no_rebuild, d->rebuilt = 0;
      if (was_rebuilt) st = rr__ddp_make_buckets(d, NULL);
    } else {
      int *ready = rr__calloc((size_t)n + 1, sizeof *ready);
      if (!ready) st = RR_ENOMEM;
      for (int k = 0; ready && k < n; k++) ready[k] = msg[k + 1];
      /* Rebuilt from the same order on every rank: the same layout, so a rank that already
       * had it gets it again (cheap: once per failure). */
      if (st == RR_OK) st = rr__ddp_make_buckets(d, ready);
      free(ready);
      if (st == RR_OK) d->rebuild_pending = 0, d->rebuilt = 1, d->stats.rebuilt = 1;
    }
  }
  free(msg);
  if (st != RR_OK) {
    rr__prefix_error(st, "rank %d: rr_ddp_set_group: making the agreed bucket layout", d->rank);
    return rr__ddp_abort(d, st); /* the others go on to the broadcast: tell them */
  }
  return RR_OK;
}

int rr_ddp_set_group(rr_ddp *d, rr_pg *newpg) {
  if (!d || !newpg)
    return rr__set_error(RR_EINVAL, "rr_ddp_set_group: %s is NULL", d ? "the group" : "ddp");
  rr__ddp_drop_step(d);
  d->pg = newpg;
  d->rank = rr_get_rank(newpg);
  d->world = rr_get_world_size(newpg);
  d->root = rr_get_global_rank(newpg, 0);
  if (d->rank < 0 || d->world < 1 || d->root < 0)
    return rr__ddp_break(d, rr__set_error(RR_EINVAL,
                                          "rr_ddp_set_group: this rank is not a member of the "
                                          "new group (rank %d of %d)",
                                          d->rank, d->world));
  /* The failure that brought us here is handled by this call: later calls must not keep
   * returning it. */
  d->broken = RR_OK;
  d->broken_msg[0] = '\0';
  d->forward_param_sync = 1; /* buffers go out again at the next forward */
  RR__CHECK(rr__ddp_agree_layout(d));
  /* torch's _sync_module_states again, from the new rank 0. */
  int st = rr__ddp_bcast(d, d->params, d->nparams, "rr_ddp_set_group: parameters");
  if (st == RR_OK) st = rr__ddp_bcast(d, d->buffers, d->nbuffers, "rr_ddp_set_group: buffers");
  if (st == RR_OK && (st = rr__ddp_bcast_wait(d)) != RR_OK) {
    rr__prefix_error(st, "rank %d: rr_ddp_set_group: copying broadcast tensors to CUDA device %d",
                     d->rank, d->device);
    return rr__ddp_abort(d, st);
  }
  if (st != RR_OK && !d->broken) return rr__ddp_break(d, st);
  return st;
}

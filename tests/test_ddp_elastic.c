/* test_ddp elastic W: rr_ddp_set_group after a death (issue 26 item 3, docs/elastic.md).
 *
 * W ranks train the MLP of `equiv` (small buckets, so a step has several all-reduces). A
 * random rank (0 included) kills itself by SIGKILL in the middle of a random step's backward,
 * after its last layer's gradients went to their bucket, so the step dies with all-reduces in
 * flight. Every survivor must then see the step fail, and:
 *  - its gradient memory holds its own local gradients of that step, bit for bit (nothing
 *    partly reduced was written into it);
 *  - revoke, shrink to W-1 ranks whose rank 0 is the lowest survivor, shift its parameters by
 *    a rank-dependent amount (as if only some survivors had applied the failed step), then
 *    rr_ddp_set_group: the parameters are bit-identical on every survivor;
 *  - redo the failed step and go on on the new group: after each step the parameters equal a
 *    single process trained on the survivors' batches (so the average is over W-1, not W),
 *    within 1e-6 * (1 + |p|), and are bit-identical on every survivor.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/mlp.h"
#include "tests/test_ddp.h"

#define IN 16
#define CLASSES 10
#define LOCAL 6
#define STEPS 10

typedef struct elastic_case {
  int victim, kill_step;
} elastic_case;

typedef struct el_ctx {
  rr_ddp *ddp;
  int st, die; /* die: this rank kills itself after its last layer is marked */
} el_ctx;

static int el_mark(int layer, void *p) {
  el_ctx *c = p;
  c->st = rr_ddp_grad_ready(c->ddp, 2 * layer);
  if (c->st == RR_OK) c->st = rr_ddp_grad_ready(c->ddp, 2 * layer + 1);
  if (c->die && layer == 2) raise(SIGKILL); /* layers 1 and 0 never come: buckets stay open */
  return c->st != RR_OK;
}

static void el_batch(float *x, int *y, int step, int first, int n) {
  for (int i = 0; i < n; i++) {
    size_t s = (size_t)step * 64 + (size_t)first + (size_t)i;
    for (int k = 0; k < IN; k++)
      x[(size_t)i * IN + k] =
          (float)(t_value(RR_FLOAT32, RR_SUM, g_seed ^ 0xe1a5, 0, s * IN + k) / 4.0);
    y[i] = (int)(t_bits(g_seed ^ 0xe1a5, 77, s) % CLASSES);
  }
}

static const int g_edims[4] = {IN, 32, 24, CLASSES};

/* One DDP step on this rank's share; RR_OK or the first failing call's status. */
static int el_step(rr_ddp *ddp, mlp *m, el_ctx *c, const float *x, const int *y) {
  int st = rr_ddp_forward(ddp);
  if (st != RR_OK) return st;
  mlp_forward(m, x, LOCAL);
  mlp_loss(m, y, LOCAL, 1.0f / (float)LOCAL);
  if (mlp_backward(m, LOCAL, 0, el_mark, c) != 0) return c->st;
  st = rr_ddp_sync(ddp);
  if (st == RR_OK) mlp_sgd(m, 0.1f);
  return st;
}

static int elastic_rank(int rank, void *arg) {
  const elastic_case *ec = arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int w = rr_get_world_size(pg);
  mlp m, ref, loc;
  T_CHECK(mlp_init(&m, 3, g_edims, 64, g_seed + (uint64_t)rank) == 0, "mlp_init");
  T_CHECK(mlp_init(&ref, 3, g_edims, 64, g_seed) == 0, "mlp_init");
  T_CHECK(mlp_init(&loc, 3, g_edims, 64, g_seed) == 0, "mlp_init");
  rr_ddp_tensor p[6];
  mlp_ddp_params(&m, p);
  rr_ddp_options opt = RR_DDP_OPTIONS_INIT;
  opt.bucket_cap_mb = 2000.0 / MIB; /* several buckets: several all-reduces per step */
  rr_ddp *ddp;
  T_OK(rr_ddp_init(&ddp, pg, p, 6, NULL, 0, &opt));
  T_CHECK(rr_ddp_num_buckets(ddp) > 1, "want several buckets, got %d", rr_ddp_num_buckets(ddp));
  float x[64 * IN];
  int y[64], failed = 0, gr = rr_get_rank(pg);
  el_ctx c = {.ddp = ddp};
  for (int s = 0; s < STEPS; s++) {
    int gb = LOCAL * w;
    el_batch(x, y, s, 0, gb);
    c.die = !failed && rank == ec->victim && s == ec->kill_step;
    int st = el_step(ddp, &m, &c, x + (size_t)gr * LOCAL * IN, y + gr * LOCAL);
    int same = 0, in_check = 0;
    if (st == RR_OK) {
      /* Reference: one process on the batches of the group's ranks. */
      mlp_forward(&ref, x, gb);
      mlp_loss(&ref, y, gb, 1.0f / (float)gb);
      mlp_backward(&ref, gb, 0, NULL, NULL);
      mlp_sgd(&ref, 0.1f);
      /* The check is a collective too: the death may surface here, in the step before the
       * kill's (over TCP the victim's reset can discard bytes it had already sent, so a rank
       * still reading the last check fails in it while the others fail in the next step). */
      st = same_on_all(pg, m.params, m.nweights * sizeof(float), &same);
      in_check = st != RR_OK;
    }
    if (st != RR_OK) {
      T_CHECK(!failed, "step %d failed on the shrunk group: %s", s, rr_last_error());
      T_CHECK(s == ec->kill_step || (in_check && s == ec->kill_step - 1),
              "step %d failed%s, the kill was at step %d: %s", s, in_check ? " (its check)" : "",
              ec->kill_step, rr_last_error());
      printf("rank %d: step %d%s failed: %s: %s\n", rank, s, in_check ? "'s check" : "",
             rr_status_name(st), rr_last_error());
      /* The failed step's gradients are this rank's own: recompute them without DDP. (A
       * failed check came after a step that completed: nothing to compare.) */
      memcpy(loc.params, m.params, m.nweights * sizeof(float));
      mlp_forward(&loc, x + (size_t)gr * LOCAL * IN, LOCAL);
      mlp_loss(&loc, y + gr * LOCAL, LOCAL, 1.0f / (float)LOCAL);
      mlp_backward(&loc, LOCAL, 0, NULL, NULL);
      T_CHECK(in_check || memcmp(loc.grads, m.grads, m.nweights * sizeof(float)) == 0,
              "after the failed step the gradients are not this rank's own");
      T_OK(rr_pg_revoke(pg));
      rr_pg *np = NULL;
      T_OK(rr_pg_shrink(pg, 0, &np));
      T_CHECK(rr_get_world_size(np) == w - 1, "new world %d, want %d", rr_get_world_size(np),
              w - 1);
      T_CHECK(rr_get_global_rank(np, 0) == (ec->victim == 0 ? 1 : 0), "new rank 0 is old rank %d",
              rr_get_global_rank(np, 0));
      /* As if some survivors had applied the failed step and others not: rr_ddp_set_group
       * must leave every survivor with the new rank 0's parameters. */
      for (size_t i = 0; i < m.nweights; i++) m.params[i] += 1e-3f * (float)rank;
      T_OK(rr_ddp_set_group(ddp, np));
      T_CHECK(rr_destroy_process_group(pg) != RR_OK, "the old group's failure was lost");
      pg = np;
      w = rr_get_world_size(pg);
      gr = rr_get_rank(pg);
      T_OK(same_on_all(pg, m.params, m.nweights * sizeof(float), &same));
      T_CHECK(same, "parameters differ across survivors after rr_ddp_set_group");
      memcpy(ref.params, m.params, m.nweights * sizeof(float)); /* the reference restarts */
      failed = 1;
      /* A failed step is dropped and done again on the new group; after a failed check the
       * step was done: the next one is the one the others redo. */
      if (!in_check) s--;
      continue;
    }
    T_CHECK(same, "step %d (world %d): parameters differ across ranks", s, w);
    double worst = 0;
    for (size_t i = 0; i < m.nweights; i++) {
      double d = (double)m.params[i] - (double)ref.params[i];
      d = (d < 0 ? -d : d) / (1.0 + (ref.params[i] < 0 ? -ref.params[i] : ref.params[i]));
      if (!(d <= worst)) worst = d;
    }
    T_CHECK(worst <= 1e-6, "step %d (world %d): DDP differs from one process by %.3g", s, w, worst);
  }
  T_CHECK(failed, "no step failed");
  if (gr == 0) printf("survivors (world %d) identical and exact after the shrink\n", w);
  mlp_free(&m), mlp_free(&ref), mlp_free(&loc);
  T_OK(rr_ddp_destroy(ddp));
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

int sec_elastic(int w) {
  elastic_case ec = {.victim = (int)(t_bits(g_seed, 0x7e1, 0) % (uint64_t)w),
                     .kill_step = 2 + (int)(t_bits(g_seed, 0x7e1, 1) % 4)};
  printf("ddp.elastic: world %d, rank %d killed in step %d's backward\n", w, ec.victim,
         ec.kill_step);
  fflush(stdout);
  int codes[16], sigs[16];
  if (t_run(w, elastic_rank, &ec, NULL, 120, codes, sigs) != 0) {
    fprintf(stderr, "ddp.elastic: timed out (a hang)\n");
    return 1;
  }
  int bad = 0;
  for (int r = 0; r < w; r++) {
    if (r == ec.victim) {
      if (sigs[r] != SIGKILL) bad = fprintf(stderr, "rank %d was not killed\n", r) > 0;
    } else if (codes[r] != 0 || sigs[r] != 0) {
      bad = fprintf(stderr, "rank %d: exit %d, signal %d\n", r, codes[r], sigs[r]) > 0;
    }
  }
  return bad;
}

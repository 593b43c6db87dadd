/* test_ddp: the model's state across ranks: checkpoint save / load (and its failures), and the
 * broadcast of parameters and buffers at construction and at forward. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "tests/test_ddp.h"

/* ---------------------------------------------------------------------------------------------
 * checkpoint.
 */

int checkpoint_rank(int rank, void *arg) {
  const ckpt_arg *a = arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  enum { NW = 300, NB = 7 };
  float w[NW], gw[NW];
  double bias[NB], gb[NB];
  int64_t steps[2];
  rr_ddp_tensor p[2] = {
      {.name = "w",
       .data = w,
       .grad = gw,
       .count = NW,
       .dtype = RR_FLOAT32,
       .device = -1,
       .ndim = 2,
       .shape = {30, 10}},
      {.name = "b", .data = bias, .grad = gb, .count = NB, .dtype = RR_FLOAT64, .device = -1}};
  rr_ddp_tensor buf = {.name = "steps", .data = steps, .count = 2, .dtype = RR_INT64, .device = -1};
  rr_ddp *ddp;
  T_OK(rr_ddp_init(&ddp, pg, p, 2, &buf, 1, NULL));
  /* Trained state: the same on every rank. */
  t_fill(w, NW, RR_FLOAT32, RR_SUM, g_seed, 0, 0);
  t_fill(bias, NB, RR_FLOAT64, RR_SUM, g_seed, 0, 1000);
  steps[0] = 1234, steps[1] = -5;
  float w_saved[NW];
  double b_saved[NB];
  memcpy(w_saved, w, sizeof w);
  memcpy(b_saved, bias, sizeof bias);
  char path[320], victim[340], planted[360];
  snprintf(path, sizeof path, "%s/model.ckpt", a->dir);
  /* Another user may have planted a link at the temporary name a save once used (the path,
   * ".tmp." and rank 0's pid): the save must not write through it. */
  snprintf(victim, sizeof victim, "%s/victim", a->dir);
  snprintf(planted, sizeof planted, "%s.tmp.%d", path, (int)getpid());
  if (rank == 0) {
    FILE *v = fopen(victim, "w");
    T_CHECK(v && fputs("keep", v) >= 0 && fclose(v) == 0, "writing %s", victim);
    T_CHECK(symlink(victim, planted) == 0, "symlink %s", planted);
  }
  T_OK(rr_ddp_save(ddp, path));
  if (rank == 0) {
    char got[16] = "";
    FILE *v = fopen(victim, "r");
    T_CHECK(v && fgets(got, sizeof got, v) && fclose(v) == 0, "reading %s", victim);
    T_CHECK(!strcmp(got, "keep"), "the save wrote through the link planted at %s", planted);
    T_CHECK(unlink(planted) == 0 && unlink(victim) == 0, "cleaning up");
  }
  struct stat sb;
  T_CHECK(stat(path, &sb) == 0 && sb.st_size > (off_t)sizeof w, "the checkpoint exists after save");
  /* Every rank drifts differently; loading brings back rank 0's file everywhere. */
  t_fill(w, NW, RR_FLOAT32, RR_SUM, g_seed + 1, rank, 0);
  t_fill(bias, NB, RR_FLOAT64, RR_SUM, g_seed + 1, rank, 0);
  steps[0] = rank;
  T_OK(rr_ddp_load(ddp, path));
  T_CHECK(memcmp(w, w_saved, sizeof w) == 0 && memcmp(bias, b_saved, sizeof bias) == 0 &&
              steps[0] == 1234 && steps[1] == -5,
          "load restores the saved values bit for bit");
  /* A different model cannot load it. */
  float w2[NW], gw2[NW];
  rr_ddp_tensor q[2] = {p[0], p[1]};
  q[0].data = w2, q[0].grad = gw2, q[0].shape[0] = 10, q[0].shape[1] = 30;
  rr_ddp *other;
  T_OK(rr_ddp_init(&other, pg, q, 2, &buf, 1, NULL));
  int st = rr_ddp_load(other, path);
  T_CHECK(st == RR_EMISMATCH && strstr(rr_last_error(),
                                       "its params[0] is 'w' [30, 10] float, the "
                                       "model's is 'w' [10, 30] float"),
          "other model: %s: %s", rr_status_name(st), rr_last_error());
  T_OK(rr_ddp_destroy(other));
  /* A corrupt file (one byte flipped by rank 0) is refused on every rank. */
  T_OK(rr_barrier(pg));
  if (rank == 0) {
    FILE *fp = fopen(path, "r+b");
    T_CHECK(fp && fseek(fp, 100, SEEK_SET) == 0, "open %s", path);
    int c = fgetc(fp);
    T_CHECK(fseek(fp, 100, SEEK_SET) == 0 && fputc(c ^ 0x40, fp) != EOF && fclose(fp) == 0, "flip");
  }
  T_OK(rr_barrier(pg));
  st = rr_ddp_load(ddp, path);
  T_CHECK(st == RR_EPROTO && strstr(rr_last_error(), "checksum"), "corrupt: %s: %s",
          rr_status_name(st), rr_last_error());
  /* An unwritable place: rank 0 fails to write, every rank hears it. */
  st = rr_ddp_save(ddp, "/nonexistent-dir-rr/x.ckpt");
  T_CHECK(st == RR_ESYS && strstr(rr_last_error(), "nonexistent-dir-rr"), "unwritable: %s: %s",
          rr_status_name(st), rr_last_error());
  /* A missing file. */
  st = rr_ddp_load(ddp, "/nonexistent-dir-rr/x.ckpt");
  T_CHECK(st == RR_ESYS, "missing file: %s", rr_last_error());
  /* The wrapper still works after failed file operations. */
  T_OK(rr_ddp_save(ddp, path));
  T_OK(rr_ddp_load(ddp, path));
  T_OK(rr_ddp_destroy(ddp));
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * broadcast.
 */

int broadcast_rank(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  enum { NA = 257, NBF = 33 };
  float a[NA], ga[NA];
  uint16_t h[NA];
  double bn[NBF];
  int32_t cnt[3];
  t_fill(a, NA, RR_FLOAT32, RR_SUM, g_seed, rank, 0);
  t_fill(h, NA, RR_BFLOAT16, RR_SUM, g_seed, rank, 0);
  t_fill(bn, NBF, RR_FLOAT64, RR_SUM, g_seed, rank, 0);
  cnt[0] = cnt[1] = cnt[2] = 100 + rank;
  rr_ddp_tensor p[2] = {{.data = a, .grad = ga, .count = NA, .dtype = RR_FLOAT32, .device = -1},
                        {.data = h, .count = NA, .dtype = RR_BFLOAT16, .device = -1}};
  rr_ddp_tensor b[2] = {{.data = bn, .count = NBF, .dtype = RR_FLOAT64, .device = -1},
                        {.data = cnt, .count = 3, .dtype = RR_INT32, .device = -1}};
  rr_ddp_options opt = RR_DDP_OPTIONS_INIT;
  opt.broadcast_bucket_mb = 100.0 / MIB; /* 100-byte chunks: tensors span several */
  rr_ddp *ddp;
  T_OK(rr_ddp_init(&ddp, pg, p, 2, b, 2, &opt));
  T_CHECK(t_check_copied(a, NA, RR_FLOAT32, RR_SUM, g_seed, 0, 0, "param a") == 0 &&
              t_check_copied(h, NA, RR_BFLOAT16, RR_SUM, g_seed, 0, 0, "frozen param h") == 0 &&
              t_check_copied(bn, NBF, RR_FLOAT64, RR_SUM, g_seed, 0, 0, "buffer bn") == 0 &&
              cnt[0] == 100 && cnt[2] == 100,
          "construction copies rank 0's parameters and buffers");
  /* Buffers drift (as running statistics do); the next forward copies rank 0's again. */
  t_fill(bn, NBF, RR_FLOAT64, RR_SUM, g_seed + 5, rank, 0);
  cnt[1] = 200 + rank;
  t_fill(a, NA, RR_FLOAT32, RR_SUM, g_seed + 5, rank, 0); /* parameters are never re-broadcast */
  T_OK(rr_ddp_forward(ddp));
  T_CHECK(
      t_check_copied(bn, NBF, RR_FLOAT64, RR_SUM, g_seed + 5, 0, 0, "buffer after forward") == 0 &&
          cnt[1] == 200,
      "forward broadcasts buffers");
  T_CHECK(t_check_copied(a, NA, RR_FLOAT32, RR_SUM, g_seed + 5, rank, 0, "param") == 0,
          "forward leaves parameters alone");
  /* torch's rule: a forward under no_sync turns off the broadcast of the next forward. */
  T_OK(rr_ddp_no_sync(ddp, 1));
  cnt[1] = 300 + rank;
  T_OK(rr_ddp_forward(ddp)); /* previous forward was synchronised: broadcasts */
  T_CHECK(cnt[1] == 300, "forward after a synchronised one broadcasts (got %d)", cnt[1]);
  T_OK(rr_ddp_no_sync(ddp, 0));
  cnt[1] = 400 + rank;
  T_OK(rr_ddp_forward(ddp)); /* previous forward was under no_sync: no broadcast */
  T_CHECK(cnt[1] == 400 + rank, "forward after a no_sync one does not broadcast (got %d)", cnt[1]);
  T_OK(rr_ddp_forward(ddp));
  T_CHECK(cnt[1] == 400, "and the one after broadcasts again (got %d)", cnt[1]);
  /* Explicit call. */
  cnt[2] = 500 + rank;
  T_OK(rr_ddp_broadcast_buffers(ddp));
  T_CHECK(cnt[2] == 500, "rr_ddp_broadcast_buffers");
  T_OK(rr_ddp_destroy(ddp));
  /* broadcast_buffers off: forward leaves them. */
  opt.broadcast_buffers = 0;
  T_OK(rr_ddp_init(&ddp, pg, p, 2, b, 2, &opt));
  cnt[0] = 600 + rank;
  T_OK(rr_ddp_forward(ddp));
  T_CHECK(cnt[0] == 600 + rank, "broadcast_buffers = 0: buffers stay local");
  T_OK(rr_ddp_destroy(ddp));
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

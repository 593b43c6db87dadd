/* test_ddp: the device path against the host path, on a GPU (the "gpu" section) or on the
 * host fake of the CUDA table ("gpufake", tests/fake_cuda/, every CI run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "tests/test_ddp.h"

/* ---------------------------------------------------------------------------------------------
 * gpu: the device path against the host path. Needs a GPU; skips (77) without one.
 * gpufake: the same on the host fake (tests/cuda_harness.h), where the device kernels are
 * their element functions run by the fake's stream workers.
 *
 * Each rank builds the mixed model of `grads` twice, once in host memory and once in device
 * memory (same values), wraps each in its own rr_ddp, and runs both through the same steps
 * for every hook (none, allreduce, fp16, bf16), with the group's stream left at the legacy
 * default and with a user stream on which the gradients are still being written when they
 * are marked ready. The tolerance between the two paths is zero: the device kernels compute
 * the host loops' bits (cuda/ddp_elem.cuh, tests/test_ddp_elem.c) and the all-reduce of a
 * device bucket is the host one on a staged copy, so every averaged gradient, broadcast
 * parameter and buffer, and the checkpoint file must be bit-identical to the host path's
 * (which ddp.grads / ddp.hooks check against the float64 mean), and identical on all ranks.
 */

#include "tests/cuda_harness.h"

/* 1 when count elements of device memory equal the host ones bit for bit; else prints the
 * first difference (or the CUDA error) and returns 0. */
static int dev_equals(const void *dev, const void *host, size_t count, rr_dtype d,
                      const char *what) {
  size_t es = rr_dtype_size(d), bytes = count * es;
  char *h = malloc(bytes + 1);
  int e = h ? cu_copy(h, dev, bytes) : RR__CUDA_ERR_MEMORY_ALLOCATION;
  if (e != 0) {
    fprintf(stderr, "rank %d: %s: reading device memory: %s\n", t_rank, what, cu->error_string(e));
    free(h);
    return 0;
  }
  int same = memcmp(h, host, bytes) == 0;
  if (!same) {
    size_t i = 0;
    while (memcmp(h + i * es, (const char *)host + i * es, es) == 0) i++;
    fprintf(stderr, "rank %d: %s: element %zu is %.9g on the device path, %.9g on the host path\n",
            t_rank, what, i, t_load(h, i, d), t_load(host, i, d));
  }
  free(h);
  return same;
}

static int g_fake;

static int gpu_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int w = rr_get_world_size(pg), dev = -1;
  T_OK(rr__cuda_pick_device(-1, rank, &dev)); /* one GPU: every rank on device 0 */
  C_OK(set_device(dev));
  void *user;
  C_OK(stream_create(&user, 1));
  const size_t slow_bytes =
      g_fake ? 4u << 20 : 64u << 20; /* copies that keep the user stream busy */
  char *slow_a, *slow_b;
  C_OK(malloc((void **)&slow_a, slow_bytes));
  C_OK(malloc((void **)&slow_b, slow_bytes));
  void *hdata[NP_GRADS], *hgrad[NP_GRADS], *ddata[NP_GRADS], *dgrad[NP_GRADS];
  rr_ddp_tensor hp[NP_GRADS], dp[NP_GRADS];
  for (int i = 0; i < NP_GRADS; i++) {
    size_t bytes = g_counts[i] * rr_dtype_size(g_dtypes[i]);
    int frozen = g_dtypes[i] == RR_INT32;
    hdata[i] = calloc(1, bytes), hgrad[i] = frozen ? NULL : calloc(1, bytes);
    C_OK(malloc(&ddata[i], bytes));
    dgrad[i] = NULL;
    if (!frozen) C_OK(malloc(&dgrad[i], bytes));
    hp[i] = (rr_ddp_tensor){.data = hdata[i],
                            .grad = hgrad[i],
                            .count = g_counts[i],
                            .dtype = g_dtypes[i],
                            .device = -1};
    dp[i] = hp[i];
    dp[i].data = ddata[i], dp[i].grad = dgrad[i], dp[i].device = dev;
  }
  /* Buffers: a float32 running statistic and an int64 counter. */
  enum { NB = 50 };
  float hstat[NB];
  int64_t hcount[2];
  void *dstat, *dcount;
  C_OK(malloc(&dstat, sizeof hstat));
  C_OK(malloc(&dcount, sizeof hcount));
  rr_ddp_tensor hb[2] = {
      {.name = "stat", .data = hstat, .count = NB, .dtype = RR_FLOAT32, .device = -1},
      {.name = "count", .data = hcount, .count = 2, .dtype = RR_INT64, .device = -1}};
  rr_ddp_tensor db[2] = {hb[0], hb[1]};
  db[0].data = dstat, db[0].device = dev;
  db[1].data = dcount, db[1].device = dev;
  const rr_ddp_hook hooks[4] = {RR_DDP_HOOK_NONE, RR_DDP_HOOK_ALLREDUCE, RR_DDP_HOOK_FP16,
                                RR_DDP_HOOK_BF16};
  char ckpt_h[64], ckpt_d[64];
  snprintf(ckpt_h, sizeof ckpt_h, "/tmp/rr_ddp_gpu.%d.host.ckpt", (int)getppid());
  snprintf(ckpt_d, sizeof ckpt_d, "/tmp/rr_ddp_gpu.%d.dev.ckpt", (int)getppid());
  int cases = 0;
  for (int h = 0; h < 4; h++)
    for (int use_stream = 0; use_stream < 2; use_stream++) {
      void *s = use_stream ? user : NULL;
      T_OK(rr_pg_set_cuda_stream(pg, s));
      uint64_t seed = g_seed + (uint64_t)(h * 2 + use_stream) * 7919;
      /* Different values on every rank: construction must make them rank 0's. */
      for (int i = 0; i < NP_GRADS; i++) {
        t_fill(hdata[i], g_counts[i], g_dtypes[i], RR_SUM, seed, rank, (size_t)i * 1000);
        T_CHECK(!cu_copy(ddata[i], hdata[i], g_counts[i] * rr_dtype_size(g_dtypes[i])), "upload");
      }
      t_fill(hstat, NB, RR_FLOAT32, RR_SUM, seed, rank, 7);
      hcount[0] = hcount[1] = 10 + rank;
      T_CHECK(!cu_copy(dstat, hstat, sizeof hstat), "upload");
      T_CHECK(!cu_copy(dcount, hcount, sizeof hcount), "upload");
      rr_ddp_options opt = RR_DDP_OPTIONS_INIT;
      opt.bucket_cap_mb = 1000.0 / MIB;      /* ~1000 bytes: many buckets */
      opt.broadcast_bucket_mb = 300.0 / MIB; /* chunks smaller than some tensors */
      opt.hook = hooks[h];
      rr_ddp *hd, *dd;
      T_OK(rr_ddp_init(&hd, pg, hp, NP_GRADS, hb, 2, &opt));
      T_OK(rr_ddp_init(&dd, pg, dp, NP_GRADS, db, 2, &opt));
      T_CHECK(rr_ddp_num_buckets(dd) == rr_ddp_num_buckets(hd) && rr_ddp_num_buckets(dd) >= 6,
              "%d device buckets, %d host", rr_ddp_num_buckets(dd), rr_ddp_num_buckets(hd));
      rr_ddp_bucket_info bi;
      T_OK(rr_ddp_get_bucket(dd, 0, &bi));
      T_CHECK(bi.device == dev, "device bucket 0 is on device %d", bi.device);
      for (int i = 0; i < NP_GRADS; i++)
        T_CHECK(dev_equals(ddata[i], hdata[i], g_counts[i], g_dtypes[i], "broadcast parameter") &&
                    t_check_copied(hdata[i], g_counts[i], g_dtypes[i], RR_SUM, seed, 0,
                                   (size_t)i * 1000, "rank 0's parameter") == 0,
                "hook %d stream %d: parameter %d after construction", h, use_stream, i);
      T_CHECK(dev_equals(dstat, hstat, NB, RR_FLOAT32, "broadcast buffer") && hcount[0] == 10 &&
                  dev_equals(dcount, hcount, 2, RR_INT64, "broadcast counter"),
              "buffers after construction");
      for (int it = 0; it < 3; it++) { /* the second one runs on rebuilt buckets */
        /* Buffers drift on each rank; forward copies rank 0's (both paths). */
        t_fill(hstat, NB, RR_FLOAT32, RR_SUM, seed + (uint64_t)it + 1, rank, 7);
        T_CHECK(!cu_copy(dstat, hstat, sizeof hstat), "upload");
        T_OK(rr_ddp_forward(hd));
        T_OK(rr_ddp_forward(dd));
        /* The broadcast buffers are written in the group's stream's order; the legacy stream
         * that dev_equals reads on is not ordered with a non-blocking user stream. */
        if (use_stream) C_OK(stream_sync(s));
        T_CHECK(dev_equals(dstat, hstat, NB, RR_FLOAT32, "buffer after forward") &&
                    t_check_copied(hstat, NB, RR_FLOAT32, RR_SUM, seed + (uint64_t)it + 1, 0, 7,
                                   "rank 0's buffer") == 0,
                "hook %d stream %d iteration %d: buffers after forward", h, use_stream, it);
        uint64_t gs = seed + 1000 + (uint64_t)it;
        int ord[NP_GRADS];
        shuffle(ord, NP_GRADS, gs, 100 + (uint64_t)rank);
        /* Host path: a whole backward, then the device path's (one wrapper at a time, so the
         * ranks' collectives stay in the same order). */
        for (int i = 0; i < NP_GRADS; i++)
          if (hgrad[i]) fill_grad(hgrad[i], g_counts[i], g_dtypes[i], gs, rank, (size_t)i * 1000);
        for (int k = 0; k < NP_GRADS; k++)
          if (hgrad[ord[k]]) T_OK(rr_ddp_grad_ready(hd, ord[k]));
        /* The host gradients are about to be overwritten by the average: keep the inputs,
         * in pinned memory so that the copies below are truly asynchronous. */
        void *in[NP_GRADS];
        for (int i = 0; i < NP_GRADS; i++) {
          in[i] = NULL;
          if (!hgrad[i]) continue;
          C_OK(host_alloc(&in[i], g_counts[i] * rr_dtype_size(g_dtypes[i])));
          fill_grad(in[i], g_counts[i], g_dtypes[i], gs, rank, (size_t)i * 1000);
        }
        T_OK(rr_ddp_sync(hd));
        for (int k = 0; k < NP_GRADS; k++) {
          int i = ord[k];
          if (!dgrad[i]) continue;
          size_t bytes = g_counts[i] * rr_dtype_size(g_dtypes[i]);
          if (use_stream) {
            /* Still being written on the user stream when marked ready: garbage first, a
             * stretch of other work, then the real gradient. Only a copy-in ordered on the
             * group's stream (this one) sees the real one. */
            C_OK(memset_async(dgrad[i], 0xff, bytes, s));
            for (int q = 0; k == 0 && q < 4; q++) C_OK(memcpy_async(slow_b, slow_a, slow_bytes, s));
            C_OK(memcpy_async(dgrad[i], in[i], bytes, s));
          } else {
            T_CHECK(!cu_copy(dgrad[i], in[i], bytes), "upload");
          }
          T_OK(rr_ddp_grad_ready(dd, i));
        }
        T_OK(rr_ddp_sync(dd));
        /* rr_ddp_sync leaves the averages queued on the group's stream (it does not wait for
         * it): a reader on another stream or the host synchronises first, as here. */
        if (use_stream) C_OK(stream_sync(s));
        for (int i = 0; i < NP_GRADS; i++) {
          if (in[i]) C_OK(host_free(in[i])); /* its copies ran: the stream was waited for */
          if (!dgrad[i]) continue;
          char what[96];
          snprintf(what, sizeof what, "hook %d stream %d iteration %d param %d (%s)", h, use_stream,
                   it, i, rr_dtype_name(g_dtypes[i]));
          T_CHECK(dev_equals(dgrad[i], hgrad[i], g_counts[i], g_dtypes[i], what),
                  "%s: the device path's average differs from the host path's", what);
          int same;
          T_OK(same_on_all(pg, hgrad[i], g_counts[i] * rr_dtype_size(g_dtypes[i]), &same));
          T_CHECK(same, "%s: differs across ranks", what);
          cases++;
        }
      }
      rr_ddp_stats hs, ds;
      T_OK(rr_ddp_get_stats(hd, &hs));
      T_OK(rr_ddp_get_stats(dd, &ds));
      T_CHECK(ds.syncs == 3 && ds.rebuilt && ds.bytes_reduced == hs.bytes_reduced,
              "stats: %lld syncs, rebuilt %d, %.0f bytes (host path %.0f)", (long long)ds.syncs,
              ds.rebuilt, ds.bytes_reduced, hs.bytes_reduced);
      /* no_sync: nothing moves, device gradients stay as they are. */
      T_OK(rr_ddp_no_sync(dd, 1));
      T_OK(rr_ddp_forward(dd));
      for (int i = 0; i < NP_GRADS; i++)
        if (dgrad[i]) T_OK(rr_ddp_grad_ready(dd, i));
      T_OK(rr_ddp_sync(dd));
      for (int i = 0; i < NP_GRADS; i++)
        if (dgrad[i])
          T_CHECK(dev_equals(dgrad[i], hgrad[i], g_counts[i], g_dtypes[i], "no_sync"),
                  "no_sync changed device gradient %d", i);
      T_OK(rr_ddp_no_sync(dd, 0));
      /* Checkpoints: the device model's file is the host model's, byte for byte; loading it
       * into scrambled device parameters restores them on every rank. */
      if (h == 0 && use_stream == 0) {
        T_OK(rr_ddp_save(hd, ckpt_h));
        T_OK(rr_ddp_save(dd, ckpt_d));
        if (rank == 0) {
          FILE *a = fopen(ckpt_h, "rb"), *b = fopen(ckpt_d, "rb");
          T_CHECK(a && b, "checkpoints written");
          int ca, cb, differ = 0;
          long at = 0;
          do {
            ca = fgetc(a), cb = fgetc(b);
            differ = ca != cb;
            at++;
          } while (!differ && ca != EOF);
          fclose(a), fclose(b);
          T_CHECK(!differ,
                  "the device model's checkpoint differs from the host model's at "
                  "byte %ld",
                  at - 1);
        }
        for (int i = 0; i < NP_GRADS; i++)
          T_CHECK(!cu_set(ddata[i], 0x3c + rank, g_counts[i] * rr_dtype_size(g_dtypes[i])),
                  "memset");
        T_CHECK(!cu_set(dcount, 0, sizeof hcount), "memset");
        T_OK(rr_ddp_load(dd, ckpt_d));
        for (int i = 0; i < NP_GRADS; i++)
          T_CHECK(dev_equals(ddata[i], hdata[i], g_counts[i], g_dtypes[i], "loaded parameter"),
                  "parameter %d after rr_ddp_load", i);
        T_CHECK(dev_equals(dcount, hcount, 2, RR_INT64, "loaded buffer"), "buffer after load");
        T_OK(rr_barrier(pg));
        if (rank == 0) unlink(ckpt_h), unlink(ckpt_d);
      }
      T_OK(rr_ddp_destroy(dd));
      T_OK(rr_ddp_destroy(hd));
    }
  T_OK(rr_pg_set_cuda_stream(pg, NULL));
  for (int i = 0; i < NP_GRADS; i++) {
    free(hdata[i]), free(hgrad[i]);
    C_OK(free(ddata[i]));
    if (dgrad[i]) C_OK(free(dgrad[i]));
  }
  C_OK(free(dstat));
  C_OK(free(dcount));
  C_OK(free(slow_a));
  C_OK(free(slow_b));
  C_OK(stream_destroy(user));
  if (rank == 0)
    printf(
        "gpu: %d averaged gradients on device %d bit-identical to the host path on %d ranks "
        "(hooks none/allreduce/fp16/bf16, legacy and user stream), broadcasts, no_sync and "
        "checkpoints too\n",
        cases, dev, w);
  T_OK(rr_destroy_process_group(pg));
  return 0;
}
int sec_gpu(int w, int fake) {
  g_fake = fake;
  if (fake) {
    if (rr_fake_cuda_install(CU_FAKE_DEVICES) != RR_OK) {
      fprintf(stderr, "%s\n", rr_last_error());
      return 1;
    }
    cu = rr_fake_cuda(CU_FAKE_DEVICES);
  } else {
    cu = rr__cuda_real_api();
  }
  if (!cu) {
    printf("skipped: no CUDA device (this build has no CUDA: configure with -DRR_CUDA=ON)\n");
    return 77;
  }
  if (!have_device_forked()) {
    printf("skipped: no CUDA device (the CUDA runtime found no usable driver or GPU)\n");
    return 77;
  }
  return t_run_all(w, gpu_rank, NULL, 300, NULL);
}

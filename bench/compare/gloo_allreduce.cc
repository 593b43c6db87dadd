// Gloo's allreduce over its TCP transport, float32 sum, in place (Gloo's algorithms reduce in
// place), timed as nccl-tests does: warm-up calls, a barrier, -n back-to-back calls; each
// rank's mean, then the maximum over ranks; then one more call on fresh data is checked.
//
//   -a ring          gloo::AllreduceRing (one algorithm object per size, built before timing)
//   -a ring_chunked  gloo::AllreduceRingChunked (likewise)
//
// Not included: gloo::allreduce() (the unbound-buffer API torch.distributed's own, newer Gloo
// uses). In Debian's libgloo 0.5.0 it stalled for tens of ms to seconds per call from 32 KiB
// up here, and with few iterations returned wrong sums, so it is no fair stand-in for torch.
//
// Rank and world size from RANK / WORLD_SIZE (rrun, torchrun); rendezvous through a
// gloo::rendezvous::FileStore in $GLOO_STORE (a fresh directory per job). Written for the
// Debian libgloo-dev 0.5.0 API. Prints the RESULT lines of common.h.
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common.h"

static void barrier(const std::shared_ptr<gloo::Context> &ctx) {
  gloo::BarrierOptions b(ctx);
  gloo::barrier(b);
}

int main(int argc, char **argv) {
  cmp_opts o;
  cmp_parse(argc, argv, &o, nullptr);
  std::string algo = o.algo;
  std::string system = o.system ? o.system : "gloo-" + algo;
  if (algo != "ring" && algo != "ring_chunked") cmp_usage(argv[0]);
  int rank = cmp_env_int("RANK", "OMPI_COMM_WORLD_RANK", 0);
  int np = cmp_env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", 1);
  const char *dir = getenv("GLOO_STORE");
  if (!dir) {
    fprintf(stderr, "gloo_allreduce: set GLOO_STORE to a fresh directory shared by the ranks\n");
    return 2;
  }

  gloo::transport::tcp::attr attr("127.0.0.1");
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore fs(dir);
  gloo::rendezvous::PrefixStore store("cmp", fs);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, np);
  ctx->setTimeout(std::chrono::seconds(600));
  ctx->connectFullMesh(store, dev);
  std::shared_ptr<gloo::Context> c = ctx;

  size_t maxcount = o.maxbytes / sizeof(float);
  float *buf;
  if (posix_memalign((void **)&buf, 4096, maxcount * sizeof(float) + 4096)) {
    fprintf(stderr, "gloo_allreduce: rank %d: cannot allocate %zu bytes\n", rank, o.maxbytes);
    return 1;
  }
  // Timed calls run in place on written zeros (sums stay finite and pages are resident).
  memset(buf, 0, maxcount * sizeof(float));

  for (size_t bytes = o.minbytes; bytes <= o.maxbytes; bytes *= o.factor) {
    int count = (int)(bytes / sizeof(float));
    int iters = cmp_iters(&o, bytes), warm = cmp_warmup(&o, bytes);
    std::vector<float *> ptrs{buf};
    std::unique_ptr<gloo::Algorithm> alg;
    if (algo == "ring") alg.reset(new gloo::AllreduceRing<float>(c, ptrs, count));
    if (algo == "ring_chunked") alg.reset(new gloo::AllreduceRingChunked<float>(c, ptrs, count));
    auto call = [&]() { alg->run(); };
    for (int i = 0; i < warm; i++) call();
    barrier(c);
    double t0 = cmp_now_us();
    for (int i = 0; i < iters; i++) call();
    double t = (cmp_now_us() - t0) / iters;
    cmp_fill(buf, (size_t)count, rank);
    call();
    double v[2] = {t, (double)cmp_check(buf, (size_t)count, np)};
    memset(buf, 0, (size_t)count * sizeof(float));
    {
      std::vector<double *> vp{v};
      gloo::AllreduceRing<double> mx(c, vp, 2, gloo::ReductionFunction<double>::max);
      mx.run();
    }
    if (rank == 0) cmp_report(system.c_str(), np, bytes, v[0], (long)v[1]);
    if (bytes > o.maxbytes / o.factor) break;
  }
  barrier(c);
  return 0;
}

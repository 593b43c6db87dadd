/*
 * MPI_Allreduce, float32 sum, out of place (-I: in place, MPI_IN_PLACE), timed as nccl-tests
 * does: warm-up calls, a barrier, -n back-to-back calls; each rank's mean, then the maximum
 * over ranks. Then the receive buffer is poisoned (in place: given the input again), one more
 * call runs and every element is checked. In place, the timed calls sum their own results
 * over and over, as ringreduce's all_reduce_perf does in place (the values grow, and may
 * reach inf at large -n; finite or not, an add costs the same).
 *
 *   mpirun -np 4 ./mpi_allreduce -b 8 -e 256M -f 4 -N -s mpi-tcp
 *
 * Prints the RESULT lines of common.h.
 */
#include <mpi.h>

#include "common.h"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, np;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  cmp_opts o;
  cmp_parse(argc, argv, &o, "mpi");

  size_t maxcount = o.maxbytes / sizeof(float);
  float *src, *dst;
  if (posix_memalign((void **)&src, 4096, maxcount * sizeof(float) + 4096) ||
      posix_memalign((void **)&dst, 4096, maxcount * sizeof(float) + 4096)) {
    fprintf(stderr, "mpi_allreduce: rank %d: cannot allocate %zu bytes\n", rank, o.maxbytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  cmp_fill(src, maxcount, rank);
  memset(dst, 0, maxcount * sizeof(float));

  /* Out of place src -> dst; in place the call's input is dst itself. */
  const void *in = o.in_place ? MPI_IN_PLACE : (const void *)src;
  if (o.in_place) memcpy(dst, src, maxcount * sizeof(float));
  for (size_t bytes = o.minbytes; bytes <= o.maxbytes; bytes *= o.factor) {
    int count = (int)(bytes / sizeof(float));
    int iters = cmp_iters(&o, bytes), warm = cmp_warmup(&o, bytes);
    for (int i = 0; i < warm; i++)
      MPI_Allreduce(in, dst, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = cmp_now_us();
    for (int i = 0; i < iters; i++)
      MPI_Allreduce(in, dst, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = (cmp_now_us() - t0) / iters;
    if (o.in_place)
      memcpy(dst, src, (size_t)count * sizeof(float));
    else
      memset(dst, 0xff, (size_t)count * sizeof(float));
    MPI_Allreduce(in, dst, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double v[2] = {t, (double)cmp_check(dst, (size_t)count, np)}, m[2];
    MPI_Reduce(v, m, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) cmp_report(o.system, np, bytes, m[0], (long)m[1]);
    if (bytes > o.maxbytes / o.factor) break;
  }
  MPI_Finalize();
  return 0;
}

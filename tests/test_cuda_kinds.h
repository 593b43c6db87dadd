/* test_cuda coll's cases for the kinds CUDA IPC carries beyond the ring and broadcast (issue
 * 24 part 2): reduce (checked in others()), gather, scatter, all_to_all and all_to_allv on
 * device buffers, in and out of place, each result checked exactly, every block a rank's own
 * included (the local copies run on the device: a skipped one leaves the 0xa5 fill). With
 * RR_TEST_EXPECT_IPC=1 every rank that sends data in a call must have sent it through CUDA
 * IPC (the process's segment counter, transport/cuda_ipc.c), so a kind that is staged fails;
 * with 0 none may. Point to point on device buffers: kinds_p2p and kinds_p2p_first.
 *
 * A header, not a file of its own: it is part of test_cuda's one program (one binary per GPU
 * run), shares its buffer helpers (dalloc, put, get, expect_ipc, check_piped, defined before
 * the include) and keeps test_cuda.c, already over 800 lines, from growing. */
#ifndef RR__TESTS_TEST_CUDA_KINDS_H
#define RR__TESTS_TEST_CUDA_KINDS_H

/* This rank's part of one call: `sends` says whether it sends any data segment. */
static int kinds_ipc(uint64_t before, int sends, const char *what) {
  uint64_t got = dev_moved() - before;
  if (expect_ipc() == 1 && sends) T_CHECK(got > 0, "%s: nothing went through CUDA IPC", what);
  if (expect_ipc() == 0)
    T_CHECK(got == 0, "%s: %llu segments went through CUDA IPC", what, (unsigned long long)got);
  return 0;
}

/* Download `count` int32 at dev + at elements and check them against rank src's data from
 * element `first`. */
static int kinds_block(const char *dev, size_t at, size_t count, uint64_t seed, int src,
                       size_t first, const char *what, int q) {
  if (!count) return 0;
  char *h = t_alloc(count * 4);
  T_CHECK(!get(h, dev + at * 4, count * 4), "download");
  size_t wrong = t_check_copied(h, count, RR_INT32, RR_SUM, seed, src, first, what);
  free(h);
  T_CHECK(!wrong, "%s block %d: %zu wrong elements", what, q, wrong);
  return 0;
}

/* Fill `count` int32 at dev + at elements with rank src's data from element `first`. */
static int kinds_fill(char *dev, size_t at, size_t count, uint64_t seed, int src, size_t first) {
  if (!count) return 0;
  char *h = t_alloc(count * 4);
  t_fill(h, count, RR_INT32, RR_SUM, seed, src, first);
  T_CHECK(!put(dev + at * 4, h, count * 4), "upload");
  free(h);
  return 0;
}

/* all_to_allv's pair sizes: some pairs empty, the rest of different sizes around `count`; from
 * world 3 rank 0 moves nothing at all (so it takes the host path beside its peers' CUDA IPC,
 * group/ipc.c). */
static size_t kinds_v(int i, int j, int n, size_t count) {
  if (n >= 3 && (i == 0 || j == 0)) return 0;
  return i != j && (i + 2 * j) % 3 == 0 ? 0 : count + (size_t)(i + 2 * j);
}

static int kinds_linear(rr_pg *pg, size_t count, uint64_t seed) {
  const int n = rr_get_world_size(pg), r = rr_get_rank(pg), root = n > 1 ? 1 : 0;
  const size_t blk = count * 4, all = blk * (size_t)n;
  char *big = dalloc(all), *out = dalloc(all), *small = dalloc(blk);
  char what[64];
  for (int inplace = 0; inplace < 2; inplace++) {
    const char *how = inplace ? "in place" : "out of place";
    /* gather to `root`: block q is rank q's data; in place, the root's block is already in
     * recvbuf (sendbuf == recvbuf + root * count) */
    C_OK(memset_async(out, 0xa5, all ? all : 1, NULL));
    char *gsend = inplace && r == root ? out + (size_t)root * blk : small;
    if (kinds_fill(gsend, 0, count, seed, r, 0)) return 1;
    uint64_t before = dev_moved(), pbefore = rr__piped_segments();
    T_OK(rr_gather(pg, gsend, out, count, RR_INT32, root));
    snprintf(what, sizeof what, "device gather %s", how);
    if (kinds_ipc(before, n > 1 && count > 0 && r != root, what)) return 1;
    if (check_piped(pbefore, 0, what)) return 1;
    for (int q = 0; r == root && q < n; q++)
      if (kinds_block(out, (size_t)q * count, count, seed, q, 0, what, q)) return 1;
    /* scatter from `root`: rank q gets elements q * count.. of the root's data; in place, the
     * root's block stays where it is (recvbuf == sendbuf + root * count) */
    if (r == root && kinds_fill(big, 0, count * (size_t)n, seed, root, 0)) return 1;
    char *srecv = inplace && r == root ? big + (size_t)root * blk : small;
    if (!(inplace && r == root)) C_OK(memset_async(srecv, 0xa5, blk ? blk : 1, NULL));
    before = dev_moved(), pbefore = rr__piped_segments();
    T_OK(rr_scatter(pg, big, srecv, count, RR_INT32, root));
    snprintf(what, sizeof what, "device scatter %s", how);
    if (kinds_ipc(before, n > 1 && count > 0 && r == root, what)) return 1;
    if (check_piped(pbefore, 0, what)) return 1;
    if (kinds_block(srecv, 0, count, seed, root, (size_t)r * count, what, r)) return 1;
    if (inplace) continue; /* all_to_all(v) have no in-place form */
    /* all_to_all: block j of rank r's sendbuf is its data from j * count */
    if (kinds_fill(big, 0, count * (size_t)n, seed, r, 0)) return 1;
    C_OK(memset_async(out, 0xa5, all ? all : 1, NULL));
    before = dev_moved(), pbefore = rr__piped_segments();
    T_OK(rr_all_to_all(pg, big, out, count, RR_INT32));
    if (kinds_ipc(before, n > 1 && count > 0, "device all_to_all")) return 1;
    if (check_piped(pbefore, 0, "device all_to_all")) return 1;
    for (int q = 0; q < n; q++)
      if (kinds_block(out, (size_t)q * count, count, seed, q, (size_t)r * count,
                      "device all_to_all", q))
        return 1;
  }
  /* all_to_allv: blocks one element apart (they need not tile), in reverse rank order on the
   * receiving side; rank i's block for j is its data from j * 2 * count */
  size_t sc[16], sd[16], rc[16], rd[16], send_end = 0, recv_end = 0;
  T_CHECK(n <= 16, "all_to_allv case: at most 16 ranks");
  int sends = 0;
  for (int j = 0; j < n; j++) {
    sc[j] = kinds_v(r, j, n, count), sd[j] = send_end, send_end += sc[j] + 1;
    sends |= j != r && sc[j] > 0;
  }
  for (int j = n - 1; j >= 0; j--)
    rc[j] = kinds_v(j, r, n, count), rd[j] = recv_end, recv_end += rc[j] + 1;
  char *vs = dalloc(send_end * 4), *vr = dalloc(recv_end * 4);
  for (int j = 0; j < n; j++)
    if (kinds_fill(vs, sd[j], sc[j], seed, r, (size_t)j * 2 * count)) return 1;
  C_OK(memset_async(vr, 0xa5, recv_end * 4, NULL)); /* recv_end >= n */
  uint64_t before = dev_moved(), pbefore = rr__piped_segments();
  T_OK(rr_all_to_allv(pg, vs, sc, sd, vr, rc, rd, RR_INT32));
  if (kinds_ipc(before, sends, "device all_to_allv")) return 1;
  if (check_piped(pbefore, 0, "device all_to_allv")) return 1;
  for (int q = 0; q < n; q++)
    if (kinds_block(vr, rd[q], rc[q], seed, q, (size_t)r * 2 * count, "device all_to_allv", q))
      return 1;
  C_OK(free(vs));
  C_OK(free(vr));
  C_OK(free(big));
  C_OK(free(out));
  C_OK(free(small));
  return 0;
}

/* Point to point through CUDA IPC (docs/cuda.md, "Point to point"), once every lane has its
 * device slots (after kinds_linear: all_to_all moved data between every pair): a device to
 * device sendrecv around the ring goes through CUDA IPC, and so does a device send into a
 * peer's host buffer (the receiver copies its device slot to host memory); a host send into
 * a device buffer is host bytes the receiver copies to the device. Every result exact;
 * `count` int32 may span several slots (then at least two segments went through IPC). */
static int kinds_p2p(rr_pg *pg, size_t count, uint64_t seed) {
  const int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  if (n < 2) return 0;
  const size_t blk = count * 4;
  const size_t min_seg =
      blk > (size_t)rr__params_get()->seg_bytes ? 2 : 1; /* slots hold a segment */
  char *small = dalloc(blk), *out = dalloc(blk), *h = t_alloc(blk);
  char what[96];
  /* device to device, around the ring */
  if (kinds_fill(small, 0, count, seed, r, 0)) return 1;
  C_OK(memset_async(out, 0xa5, blk, NULL));
  uint64_t before = dev_moved();
  T_OK(rr_sendrecv(pg, small, count, (r + 1) % n, out, count, (r + n - 1) % n, RR_INT32));
  uint64_t got = dev_moved() - before;
  snprintf(what, sizeof what, "device sendrecv count %zu", count);
  if (kinds_ipc(before, 1, what)) return 1;
  if (expect_ipc() == 1)
    T_CHECK(got >= min_seg, "%s: %llu segments through CUDA IPC, want at least %zu", what,
            (unsigned long long)got, min_seg);
  if (kinds_block(out, 0, count, seed, (r + n - 1) % n, 0, what, 0)) return 1;
  /* device (rank 0) to host (rank 1), then host (rank 1) to device (rank 0) */
  if (r == 0) {
    if (kinds_fill(small, 1, count - 1, seed, r, 7)) return 1; /* element 0 stays */
    before = dev_moved();
    T_OK(rr_send(pg, small, count, RR_INT32, 1));
    snprintf(what, sizeof what, "device send into host memory count %zu", count);
    if (kinds_ipc(before, 1, what)) return 1;
    C_OK(memset_async(out, 0xa5, blk, NULL));
    T_OK(rr_recv(pg, out, count, RR_INT32, 1));
    snprintf(what, sizeof what, "host send into device memory count %zu", count);
    if (kinds_block(out, 0, count, seed, 1, 3, what, 1)) return 1;
  } else if (r == 1) {
    memset(h, 0xa5, blk);
    T_OK(rr_recv(pg, h, count, RR_INT32, 0));
    snprintf(what, sizeof what, "device send into host memory count %zu", count);
    size_t wrong = t_check_copied(h + 4, count - 1, RR_INT32, RR_SUM, seed, 0, 7, what);
    T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
    t_fill(h, count, RR_INT32, RR_SUM, seed, 1, 3);
    T_OK(rr_send(pg, h, count, RR_INT32, 0));
  }
  free(h);
  C_OK(free(out));
  C_OK(free(small));
  return 0;
}

/* Before any device call: rank 1 has no device slots for rank 0 yet, and a point-to-point
 * send cannot wait for slots a host receiver never makes, so rank 0's device send goes as
 * host bytes (nothing through CUDA IPC, not a hang) and lands exact in rank 1's host buffer. */
static int kinds_p2p_first(rr_pg *pg, size_t count, uint64_t seed) {
  const int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  if (n < 2 || r > 1) return 0;
  const size_t blk = count * 4;
  char *h = t_alloc(blk);
  const char *what = "first device send into host memory";
  if (r == 0) {
    char *d = dalloc(blk);
    if (kinds_fill(d, 0, count, seed, 0, 5)) return 1;
    uint64_t before = dev_moved();
    T_OK(rr_send(pg, d, count, RR_INT32, 1));
    uint64_t got = dev_moved() - before;
    T_CHECK(got == 0, "%s: %llu segments through CUDA IPC before the peer had device slots", what,
            (unsigned long long)got);
    C_OK(free(d));
  } else {
    memset(h, 0xa5, blk);
    T_OK(rr_recv(pg, h, count, RR_INT32, 0));
    size_t wrong = t_check_copied(h, count, RR_INT32, RR_SUM, seed, 0, 5, what);
    T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  }
  free(h);
  return 0;
}

#endif /* RR__TESTS_TEST_CUDA_KINDS_H */

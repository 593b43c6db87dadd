/* libFuzzer harness: the transport's fixed-size wire decoders (ring/hdr.c, transport/comm.c,
 * rendezvous/hello.c), the ones that read bytes straight off a data or control socket.
 *
 * The first input byte picks the target, the rest is the message (zero padded or cut to
 * the decoder's size):
 *   0  rr__hdr_decode    (per-call header, 48 bytes), then rr__hdr_describe
 *   1  rr__ctl_decode    (control message, 20 bytes)
 *   2  rr__hello_decode  (setup greeting, 128 bytes)
 *   3  two headers, compared and described as a mismatch report is (coll.c's sniff path)
 *
 * Besides "no crash, no UB", every accepted message must satisfy the decoder's contract:
 * fields in range, and decode(encode(decode(x))) == decode(x). A violation abort()s, which
 * libFuzzer records as a crash. Built by tests/fuzz/run.sh (clang) and, for the replay
 * regression test, by CMake with tests/fuzz/replay.c (gcc). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rendezvous/bootstrap.h"
#include "ring/hdr.h"
#include "transport/comm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_ASSERT(cond)                                                                       \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "fuzz_wire: %s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                                \
    }                                                                                         \
  } while (0)

static void take(uint8_t *dst, size_t n, const uint8_t *src, size_t avail) {
  memset(dst, 0, n);
  memcpy(dst, src, avail < n ? avail : n);
}

/* A description must be a NUL-terminated string inside its buffer, whatever the fields. */
static void describe_ok(const rr__hdr *h) {
  char small[24], big[256];
  memset(small, 'x', sizeof small);
  const char *s = rr__hdr_describe(h, small, sizeof small);
  FZ_ASSERT(s == small && memchr(small, '\0', sizeof small) != NULL);
  s = rr__hdr_describe(h, big, sizeof big);
  FZ_ASSERT(s == big && strlen(big) < sizeof big && strlen(big) > 0);
  FZ_ASSERT(rr__kind_name(h->kind) != NULL);
}

static void fuzz_hdr(const uint8_t *p, size_t n) {
  uint8_t in[RR__HDR_BYTES], out[RR__HDR_BYTES];
  take(in, sizeof in, p, n);
  rr__hdr h, h2;
  memset(&h, 0, sizeof h);
  if (rr__hdr_decode(in, &h) != RR_OK) {
    FZ_ASSERT(rr_last_error()[0] != '\0');
    return;
  }
  FZ_ASSERT(h.kind > RR__K_NONE && h.kind < RR__K_COUNT);
  FZ_ASSERT(h.dtype < RR_NUM_DTYPES && h.op < RR_NUM_OPS);
  FZ_ASSERT(rr_dtype_size((rr_dtype)h.dtype) > 0);
  describe_ok(&h);
  rr__hdr_encode(&h, out);
  memset(&h2, 0, sizeof h2);
  FZ_ASSERT(rr__hdr_decode(out, &h2) == RR_OK);
  FZ_ASSERT(h.kind == h2.kind && h.dtype == h2.dtype && h.op == h2.op && h.algo == h2.algo &&
            h.root == h2.root && h.from == h2.from && h.seg_bytes == h2.seg_bytes &&
            h.aux == h2.aux && h.seq == h2.seq && h.count == h2.count);
}

static void fuzz_ctl(const uint8_t *p, size_t n) {
  uint8_t in[RR__CTL_FIXED], out[RR__CTL_FIXED];
  take(in, sizeof in, p, n);
  rr__ctl c, c2;
  memset(&c, 0, sizeof c);
  if (rr__ctl_decode(in, &c) != RR_OK) return;
  /* ABORT, BYE, and rr_pg_shrink's agreement messages (VOTE .. SETUP, group/elastic.c). */
  FZ_ASSERT(c.type == RR__CTL_ABORT || c.type == RR__CTL_BYE || RR__CTL_IS_SHRINK(c.type));
  FZ_ASSERT(c.len <= RR__CTL_TEXT_MAX);
  FZ_ASSERT(c.status <= 0);
  rr__ctl_encode(&c, out);
  FZ_ASSERT(rr__ctl_decode(out, &c2) == RR_OK);
  FZ_ASSERT(memcmp(&c, &c2, sizeof c) == 0);
}

static void fuzz_hello(const uint8_t *p, size_t n) {
  uint8_t in[RR__HELLO_BYTES], out[RR__HELLO_BYTES];
  take(in, sizeof in, p, n);
  rr__hello h, h2;
  memset(&h, 0, sizeof h);
  if (rr__hello_decode(in, &h) != RR_OK) return;
  FZ_ASSERT(memchr(h.group, '\0', sizeof h.group) != NULL);
  FZ_ASSERT(memchr(h.transport, '\0', sizeof h.transport) != NULL);
  FZ_ASSERT(h.from >= 0 && h.to >= 0 && h.index >= 0 && h.index < h.nsockets);
  FZ_ASSERT(h.nsockets >= 1 && h.nsockets <= 64);
  rr__hello_encode(&h, out);
  memset(&h2, 0, sizeof h2);
  FZ_ASSERT(rr__hello_decode(out, &h2) == RR_OK);
  FZ_ASSERT(strcmp(h.group, h2.group) == 0 && strcmp(h.transport, h2.transport) == 0);
  FZ_ASSERT(h.from == h2.from && h.to == h2.to && h.index == h2.index &&
            h.nsockets == h2.nsockets && h.token_hash == h2.token_hash);
}

/* What coll.c does with a header from a peer: decode, compare with its own, and on a
 * difference print both into a fixed-size message. */
static void fuzz_compare(const uint8_t *p, size_t n) {
  uint8_t a_in[RR__HDR_BYTES], b_in[RR__HDR_BYTES];
  take(a_in, sizeof a_in, p, n);
  take(b_in, sizeof b_in, n > RR__HDR_BYTES ? p + RR__HDR_BYTES : p,
       n > RR__HDR_BYTES ? n - RR__HDR_BYTES : 0);
  rr__hdr a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  int sa = rr__hdr_decode(a_in, &a), sb = rr__hdr_decode(b_in, &b);
  if (sa != RR_OK || sb != RR_OK) return;
  int same = a.kind == b.kind && a.seq == b.seq && a.count == b.count && a.dtype == b.dtype &&
             a.op == b.op && a.algo == b.algo && a.root == b.root && a.seg_bytes == b.seg_bytes &&
             a.aux == b.aux && a.from == b.from;
  char da[160], db[160], msg[512];
  rr__hdr_describe(&a, da, sizeof da);
  rr__hdr_describe(&b, db, sizeof db);
  int len = snprintf(msg, sizeof msg, "mismatched calls: rank %d called %s, but rank %d called %s",
                     a.from, da, b.from, db);
  FZ_ASSERT(len > 0);
  /* Equal headers describe equally (a mismatch report never shows two identical calls). */
  if (same) FZ_ASSERT(strcmp(da, db) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const uint8_t *p = data + 1;
  size_t n = size - 1;
  switch (data[0] & 3) {
    case 0:
      fuzz_hdr(p, n);
      break;
    case 1:
      fuzz_ctl(p, n);
      break;
    case 2:
      fuzz_hello(p, n);
      break;
    default:
      fuzz_compare(p, n);
      break;
  }
  return 0;
}

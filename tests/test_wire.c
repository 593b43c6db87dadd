/* Wire formats and the token PRF: round trips, and every malformed field rejected (the
 * decoders guard everything that arrives from a socket). Also the table of call kinds
 * (ring/kind.h): the values headers carry, and what each kind reads and writes. */
#include <string.h>

#include "common/siphash.h"
#include "rendezvous/bootstrap.h"
#include "ring/coll.h"
#include "ring/hdr.h"
#include "transport/comm.h"
#include "tests/harness.h"

static int siphash_vector(void) {
  /* The reference vector of the SipHash paper: key 00..0f, message 00..0e. */
  uint8_t key[16], msg[15];
  for (int i = 0; i < 16; i++) key[i] = (uint8_t)i;
  for (int i = 0; i < 15; i++) msg[i] = (uint8_t)i;
  T_CHECK(rr__siphash(key, msg, 15) == 0xa129ca6149be45e5ULL, "got %016llx",
          (unsigned long long)rr__siphash(key, msg, 15));
  uint8_t a[16], b[16], z[16] = {0};
  rr__token_key("secret", a);
  rr__token_key("secreu", b);
  T_CHECK(memcmp(a, b, 16) != 0 && memcmp(a, z, 16) != 0, "token keys collide or are zero");
  rr__token_key(NULL, b);
  T_CHECK(memcmp(b, z, 16) == 0, "no token must give the zero key");
  return 0;
}

static int hdr_roundtrip(void) {
  uint64_t seed = t_seed();
  for (int i = 0; i < 10000; i++) {
    rr__hdr h = {.kind = (uint8_t)(1 + t_bits(seed, 1, (uint64_t)i) % (RR__K_COUNT - 1)),
                 .dtype = (uint8_t)(t_bits(seed, 2, (uint64_t)i) % RR_NUM_DTYPES),
                 .op = (uint8_t)(t_bits(seed, 3, (uint64_t)i) % RR_NUM_OPS),
                 .algo = (uint8_t)(t_bits(seed, 4, (uint64_t)i) % 5),
                 .handoff = (uint8_t)(t_bits(seed, 11, (uint64_t)i) % 2),
                 .root = (int32_t)(t_bits(seed, 5, (uint64_t)i) % 9) - 1,
                 .from = (int32_t)(t_bits(seed, 6, (uint64_t)i) % 1000),
                 .seg_bytes = (uint32_t)t_bits(seed, 7, (uint64_t)i),
                 .aux = (uint32_t)t_bits(seed, 8, (uint64_t)i),
                 .seq = t_bits(seed, 9, (uint64_t)i),
                 .count = t_bits(seed, 10, (uint64_t)i)};
    uint8_t w[RR__HDR_BYTES];
    rr__hdr_encode(&h, w);
    rr__hdr d;
    T_OK(rr__hdr_decode(w, &d));
    T_CHECK(h.kind == d.kind && h.dtype == d.dtype && h.op == d.op && h.algo == d.algo &&
                h.handoff == d.handoff && h.root == d.root && h.from == d.from &&
                h.seg_bytes == d.seg_bytes && h.aux == d.aux && h.seq == d.seq &&
                h.count == d.count,
            "header %d changed in a round trip", i);
    /* Any single corrupted byte of the fixed fields must be caught or decode differently. */
    uint8_t bad[RR__HDR_BYTES];
    memcpy(bad, w, sizeof bad);
    bad[0] ^= 0x5a;
    T_CHECK(rr__hdr_decode(bad, &d) == RR_EPROTO, "bad magic accepted");
    memcpy(bad, w, sizeof bad);
    bad[4] = 99;
    T_CHECK(rr__hdr_decode(bad, &d) == RR_EPROTO && strstr(rr_last_error(), "version"),
            "bad version accepted");
    memcpy(bad, w, sizeof bad);
    bad[5] = RR__K_COUNT;
    T_CHECK(rr__hdr_decode(bad, &d) == RR_EPROTO, "bad kind accepted");
    memcpy(bad, w, sizeof bad);
    bad[6] = RR_NUM_DTYPES;
    T_CHECK(rr__hdr_decode(bad, &d) == RR_EPROTO, "bad dtype accepted");
    memcpy(bad, w, sizeof bad);
    bad[10] = 1;
    T_CHECK(rr__hdr_decode(bad, &d) == RR_EPROTO, "non-zero padding accepted");
    memcpy(bad, w, sizeof bad);
    bad[9] = RR__HDR_MEMOPS + 1;
    T_CHECK(rr__hdr_decode(bad, &d) == RR_EPROTO, "an unknown hand-off accepted");
  }
  char desc[160];
  rr__hdr h = {.kind = RR__K_ALL_REDUCE,
               .dtype = RR_FLOAT32,
               .op = RR_SUM,
               .algo = 1,
               .seq = 5,
               .count = 10};
  T_CHECK(!strcmp(rr__hdr_describe(&h, desc, sizeof desc), "all_reduce #5 (10 x float, sum, ring)"),
          "%s", desc);
  return 0;
}

static int ctl_and_hello(void) {
  uint8_t w[RR__CTL_FIXED];
  rr__ctl c = {.type = RR__CTL_ABORT,
               .origin = 3,
               .status = RR_EPEER,
               .len = 17,
               .seq = 0x123456789aULL},
          d;
  rr__ctl_encode(&c, w);
  T_OK(rr__ctl_decode(w, &d));
  T_CHECK(d.type == c.type && d.origin == 3 && d.status == RR_EPEER && d.len == 17 &&
              d.seq == 0x123456789aULL,
          "ctl round trip");
  c.len = RR__CTL_TEXT_MAX + 1;
  rr__ctl_encode(&c, w);
  T_CHECK(rr__ctl_decode(w, &d) == RR_EPROTO, "oversized control text accepted");
  c.len = 0, c.type = 77;
  rr__ctl_encode(&c, w);
  T_CHECK(rr__ctl_decode(w, &d) == RR_EPROTO, "unknown control type accepted");
  c.type = RR__CTL_BYE, c.status = 5;
  rr__ctl_encode(&c, w);
  T_CHECK(rr__ctl_decode(w, &d) == RR_EPROTO, "positive status accepted");

  rr__hello h = {
      .from = 4, .to = 1, .index = 2, .nsockets = 3, .token_hash = 0x1234, .nonce = 0xfeedULL};
  snprintf(h.group, sizeof h.group, "w.3");
  snprintf(h.transport, sizeof h.transport, "tcp");
  uint8_t hw[RR__HELLO_BYTES];
  rr__hello_encode(&h, hw);
  rr__hello e;
  T_OK(rr__hello_decode(hw, &e));
  T_CHECK(!strcmp(e.group, "w.3") && e.from == 4 && e.to == 1 && e.index == 2 && e.nsockets == 3 &&
              !strcmp(e.transport, "tcp") && e.token_hash == 0x1234 && e.nonce == 0xfeedULL,
          "hello round trip");
  h.index = 3; /* index must be below nsockets */
  rr__hello_encode(&h, hw);
  T_CHECK(rr__hello_decode(hw, &e) == RR_EPROTO, "socket index out of range accepted");
  h.index = 0, h.from = -2;
  rr__hello_encode(&h, hw);
  T_CHECK(rr__hello_decode(hw, &e) == RR_EPROTO, "negative rank accepted");
  memset(hw, 0x41, sizeof hw); /* "AAAA...": a stranger's bytes, unterminated strings */
  T_CHECK(rr__hello_decode(hw, &e) == RR_EPROTO, "garbage greeting accepted");
  return 0;
}

/* What a call of 4 ranks, count 3 (recvcount 5, root 2) reads and writes on the root and
 * on rank 0: the sizes the argument checks, device staging and the trace all take from
 * rr__kind_io. */
static int kind_table(void) {
  T_CHECK(RR__K_ALL_REDUCE == 1 && RR__K_BARRIER == 6 && RR__K_SEND == 7 && RR__K_ACK == 8 &&
              RR__K_ALL_TO_ALLV == 12 && RR__K_COUNT == 13,
          "a kind's value on the wire changed");
  static const struct {
    int kind;
    size_t in_root, out_root, in0, out0; /* elements; 0 also where the side is not touched */
  } want[] = {
      {RR__K_ALL_REDUCE, 3, 3, 3, 3},   {RR__K_REDUCE_SCATTER, 12, 3, 12, 3},
      {RR__K_ALL_GATHER, 3, 12, 3, 12}, {RR__K_BROADCAST, 3, 3, 0, 3},
      {RR__K_REDUCE, 3, 3, 3, 0},       {RR__K_BARRIER, 0, 0, 0, 0},
      {RR__K_SEND, 3, 0, 3, 0},         {RR__K_GATHER, 3, 12, 3, 0},
      {RR__K_SCATTER, 12, 3, 0, 3},     {RR__K_ALL_TO_ALL, 12, 12, 12, 12},
      {RR__K_RECV, 0, 3, 0, 3},         {RR__K_SENDRECV, 3, 5, 3, 5},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    rr__args a = {.kind = want[i].kind, .count = 3, .recvcount = 5, .root = 2};
    rr__call_io r = rr__kind_io(&a, 4, 2), z = rr__kind_io(&a, 4, 0);
    T_CHECK(r.in == want[i].in_root && r.out == want[i].out_root && z.in == want[i].in0 &&
                z.out == want[i].out0 && !r.gaps,
            "%s: root %zu/%zu, rank 0 %zu/%zu", rr__kind(a.kind)->name, r.in, r.out, z.in, z.out);
    T_CHECK(r.reads == (r.in > 0) && z.writes == (z.out > 0), "%s", rr__kind(a.kind)->name);
  }
  /* all_to_allv: to the end of the last non-empty block; an empty block's displacement
   * counts for nothing. */
  const size_t sc[4] = {1, 0, 2, 0}, sd[4] = {0, 9, 4, 0}, rc[4] = {0, 3, 0, 1},
               rd[4] = {5, 0, 0, 7};
  rr__args v = {.kind = RR__K_ALL_TO_ALLV,
                .sendcounts = sc,
                .sdispls = sd,
                .recvcounts = rc,
                .rdispls = rd,
                .root = -1};
  rr__call_io io = rr__kind_io(&v, 4, 1);
  T_CHECK(io.in == 6 && io.out == 8 && io.gaps, "all_to_allv: %zu/%zu", io.in, io.out);
  char b[64];
  T_CHECK(!strcmp(rr__kind_in_place_rule(RR__K_SENDRECV, b, sizeof b), "not possible for sendrecv"),
          "%s", b);
  T_CHECK(!strcmp(rr__kind_name(RR__K_RECV), "send/recv") &&
              !strcmp(rr__kind(RR__K_RECV)->name, "recv") &&
              !strcmp(rr__kind_name(RR__K_COUNT), "unknown") &&
              !strcmp(rr__kind_name(99), "unknown"),
          "kind names");
  return 0;
}

int main(void) {
  t_rank = 0;
  t_seed_announce("test_wire");
  return siphash_vector() || hdr_roundtrip() || ctl_and_hello() || kind_table();
}

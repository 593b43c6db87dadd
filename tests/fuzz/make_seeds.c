/* Writes the seed corpus of every harness with the library's own encoders, so the fuzzer
 * starts from well-formed traffic and mutates it (magic numbers and length fields are found
 * at once instead of by chance). tests/fuzz/run.sh runs it when a corpus folder is empty;
 * the committed files under tests/fuzz/corpus/ are its output.
 *   make_seeds OUTDIR      (writes OUTDIR/<harness>/<name>) */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rendezvous/store_proto.h"
#include "rendezvous/bootstrap.h"
#include "ring/hdr.h"
#include "transport/comm.h"

typedef struct buf {
  uint8_t b[8192];
  size_t n;
} buf;

static const char *g_out;

static void put(buf *m, const void *p, size_t n) {
  if (m->n + n > sizeof m->b) abort();
  memcpy(m->b + m->n, p, n);
  m->n += n;
}
static void put8(buf *m, uint8_t v) {
  put(m, &v, 1);
}

static void save(const char *harness, const char *name, const buf *m) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", g_out, harness);
  if (mkdir(path, 0755) != 0 && errno != EEXIST) abort();
  snprintf(path, sizeof path, "%s/%s/%s", g_out, harness, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(m->b, 1, m->n, f) != m->n || fclose(f) != 0) {
    fprintf(stderr, "make_seeds: cannot write %s\n", path);
    exit(1);
  }
}

/* ---- transport messages ---- */
static void hdr(buf *m, int kind, int dtype, int op, int algo, int root, int from, uint64_t seq,
                uint64_t count) {
  rr__hdr h = {.kind = (uint8_t)kind,
               .dtype = (uint8_t)dtype,
               .op = (uint8_t)op,
               .algo = (uint8_t)algo,
               .root = root,
               .from = from,
               .seg_bytes = 262144,
               .aux = 0,
               .seq = seq,
               .count = count};
  uint8_t w[RR__HDR_BYTES];
  rr__hdr_encode(&h, w);
  put(m, w, sizeof w);
}

static void ctl(buf *m, uint32_t type, int origin, int status, const char *text) {
  rr__ctl c = {
      .type = type, .origin = origin, .status = status, .len = text ? (uint32_t)strlen(text) : 0};
  uint8_t w[RR__CTL_FIXED];
  rr__ctl_encode(&c, w);
  put(m, w, sizeof w);
  if (text) put(m, text, strlen(text));
}

static void hello(buf *m, const char *group, int from, int to, int index, int nsockets,
                  uint64_t proof) {
  rr__hello h = {.from = from, .to = to, .index = index, .nsockets = nsockets, .token_hash = proof};
  snprintf(h.group, sizeof h.group, "%s", group);
  snprintf(h.transport, sizeof h.transport, "tcp");
  uint8_t w[RR__HELLO_BYTES];
  rr__hello_encode(&h, w);
  put(m, w, sizeof w);
}

static void seeds_wire(void) {
  buf m;
  m = (buf){.n = 0};
  put8(&m, 0);
  hdr(&m, RR__K_ALL_REDUCE, RR_FLOAT32, RR_SUM, RR__ALGO_RING, -1, 1, 5, 1000);
  save("wire", "hdr_all_reduce", &m);
  m = (buf){.n = 0};
  put8(&m, 0);
  hdr(&m, RR__K_BROADCAST, RR_INT64, 0, RR__ALGO_CHAIN, 2, 0, 9, 7);
  save("wire", "hdr_broadcast", &m);
  m = (buf){.n = 0};
  put8(&m, 0);
  hdr(&m, RR__K_SEND, RR_BFLOAT16, 0, 0, -1, 3, 0, 12);
  save("wire", "hdr_send", &m);
  m = (buf){.n = 0};
  put8(&m, 0);
  hdr(&m, RR__K_REDUCE, RR_FLOAT16, RR_AVG, RR__ALGO_CHAIN, 1, 0, 77, 3);
  save("wire", "hdr_reduce", &m);
  m = (buf){.n = 0};
  put8(&m, 1);
  ctl(&m, RR__CTL_ABORT, 2, RR_EPEER, NULL);
  save("wire", "ctl_abort", &m);
  m = (buf){.n = 0};
  put8(&m, 1);
  ctl(&m, RR__CTL_BYE, 0, 0, NULL);
  save("wire", "ctl_bye", &m);
  m = (buf){.n = 0};
  put8(&m, 2);
  hello(&m, "w", 3, 1, 0, 2, 0);
  save("wire", "hello_plain", &m);
  m = (buf){.n = 0};
  put8(&m, 2);
  hello(&m, "w.4.1", 7, 2, 1, 3, 0x1234567890abcdefull);
  save("wire", "hello_token", &m);
  m = (buf){.n = 0};
  put8(&m, 3);
  hdr(&m, RR__K_ALL_REDUCE, RR_FLOAT32, RR_SUM, RR__ALGO_RING, -1, 1, 5, 1000);
  hdr(&m, RR__K_BROADCAST, RR_FLOAT32, 0, RR__ALGO_CHAIN, 0, 2, 5, 1000);
  save("wire", "compare_mismatch", &m);
  m = (buf){.n = 0};
  put8(&m, 3);
  hdr(&m, RR__K_BARRIER, 0, 0, RR__ALGO_DISSEM, -1, 1, 3, 0);
  hdr(&m, RR__K_BARRIER, 0, 0, RR__ALGO_DISSEM, -1, 1, 3, 0);
  save("wire", "compare_same", &m);
}

static void seeds_ctl_stream(void) {
  buf m;
  m = (buf){.n = 0};
  put8(&m, 0);
  ctl(&m, RR__CTL_ABORT, 1, RR_ETIMEDOUT, "rank 1: all_reduce #3: timed out after 2.0 s");
  save("ctl_stream", "abort", &m);
  m = (buf){.n = 0};
  put8(&m, 1);
  ctl(&m, RR__CTL_BYE, 1, 0, NULL);
  save("ctl_stream", "bye_close", &m);
  m = (buf){.n = 0};
  put8(&m, 1);
  save("ctl_stream", "silent_close", &m);
  m = (buf){.n = 0};
  put8(&m, 2);
  ctl(&m, RR__CTL_BYE, 1, 0, NULL);
  ctl(&m, RR__CTL_ABORT, 1, RR_EPEER, "lost rank 2\x01\x7f\n");
  save("ctl_stream", "bye_then_abort_wait", &m);
  m = (buf){.n = 0};
  put8(&m, 0);
  ctl(&m, RR__CTL_ABORT, 1, 0, "x");
  m.n -= 3;
  save("ctl_stream", "abort_cut", &m);
  m = (buf){.n = 0};
  put8(&m, 3);
  put(&m, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
  save("ctl_stream", "http_garbage", &m);
  { /* the longest reason a message may carry, then a BYE */
    char text[RR__CTL_TEXT_MAX + 1];
    memset(text, 'r', RR__CTL_TEXT_MAX);
    text[RR__CTL_TEXT_MAX] = '\0';
    m = (buf){.n = 0};
    put8(&m, 0);
    ctl(&m, RR__CTL_ABORT, 1, RR_EPEER, text);
    ctl(&m, RR__CTL_BYE, 1, 0, NULL);
    save("ctl_stream", "abort_longest", &m);
  }
}

/* ---- store requests ---- */
static void req(buf *m, uint8_t op, int64_t num, int nargs, const char *const *args,
                const size_t *lens) {
  uint32_t body = 0;
  for (int i = 0; i < nargs; i++) body += 4 + (uint32_t)lens[i];
  rr__store_hdr h = {.magic = RR__STORE_REQ_MAGIC,
                     .op = op,
                     .nargs = (uint32_t)nargs,
                     .body_len = body,
                     .num = num};
  uint8_t w[RR__STORE_HDR];
  rr__store_hdr_encode(&h, w);
  put(m, w, sizeof w);
  for (int i = 0; i < nargs; i++) {
    uint8_t l[4];
    rr__put_u32(l, (uint32_t)lens[i]);
    put(m, l, 4);
    put(m, args[i], lens[i]);
  }
}
static void req1(buf *m, uint8_t op, int64_t num, const char *a) {
  size_t l = strlen(a);
  req(m, op, num, 1, &a, &l);
}
static void req2(buf *m, uint8_t op, const char *a, const char *b) {
  const char *args[2] = {a, b};
  size_t l[2] = {strlen(a), strlen(b)};
  req(m, op, 0, 2, args, l);
}

/* The handshake of a client: HELLO with a fixed nonce, AUTH with an all-zero MAC (what a
 * store without a token takes; a store with one refuses it). */
static void handshake(buf *m) {
  static const uint8_t cn[RR__STORE_NONCE] = "seed-nonce-0123";
  uint8_t mac[RR__STORE_MAC] = {0};
  const char *a = (const char *)cn;
  size_t l = RR__STORE_NONCE;
  req(m, RR__SOP_HELLO, RR__STORE_VERSION, 1, &a, &l);
  a = (const char *)mac;
  l = RR__STORE_MAC;
  req(m, RR__SOP_AUTH, 0, 1, &a, &l);
}

static void seeds_store_server(void) {
  buf m;
  /* Every opcode, in order, without a token. */
  m = (buf){.n = 0};
  put8(&m, 0);
  handshake(&m);
  req2(&m, RR__SOP_SET, "rr/w/peer/0", "global=0 pid=1 nsocks=1 addr=127.0.0.1:1 host=h");
  req1(&m, RR__SOP_GET, 1000, "rr/w/peer/0");
  req1(&m, RR__SOP_ADD, 3, "counter");
  req1(&m, RR__SOP_ADD, -1, "counter");
  {
    const char *k[2] = {"rr/w/peer/0", "counter"};
    size_t l[2] = {11, 7};
    req(&m, RR__SOP_CHECK, 0, 2, k, l);
    req(&m, RR__SOP_WAIT, 500, 2, k, l);
  }
  req1(&m, RR__SOP_DELETE, 0, "counter");
  save("store_server", "all_ops", &m);
  /* With the job token, the harness making the handshake (bit 2), cut in two writes. */
  m = (buf){.n = 0};
  put8(&m, 7);
  req2(&m, RR__SOP_SET, "k", "v");
  req1(&m, RR__SOP_GET, 100, "k");
  req1(&m, RR__SOP_ADD, 9223372036854775807LL, "n");
  req1(&m, RR__SOP_ADD, 1, "n");
  save("store_server", "token_split", &m);
  /* A handshake that cannot prove the token; one of the old version's shape. */
  m = (buf){.n = 0};
  put8(&m, 1);
  handshake(&m);
  req1(&m, RR__SOP_GET, 100, "k");
  save("store_server", "token_wrong", &m);
  m = (buf){.n = 0};
  put8(&m, 1);
  req1(&m, RR__SOP_HELLO, 1, "fuzz-job-token-0123456789abcdef");
  save("store_server", "token_v1", &m);
  m = (buf){.n = 0};
  put8(&m, 0);
  req1(&m, RR__SOP_HELLO, 3, "seed-nonce-0123");
  save("store_server", "version_wrong", &m);
  m = (buf){.n = 0};
  put8(&m, 0);
  handshake(&m);
  req1(&m, RR__SOP_GET, 60000, "never-set");
  save("store_server", "get_parks", &m);
  m = (buf){.n = 0};
  put8(&m, 0);
  req2(&m, RR__SOP_SET, "k", "before hello");
  save("store_server", "no_hello", &m);
  m = (buf){.n = 0};
  put8(&m, 0);
  req1(&m, RR__SOP_AUTH, 0, "12345678");
  save("store_server", "auth_first", &m);
  m = (buf){.n = 0};
  put8(&m, 0);
  handshake(&m);
  req2(&m, RR__SOP_SET, "k", "not a number");
  req1(&m, RR__SOP_ADD, 1, "k");
  save("store_server", "add_notint", &m);
}

/* ---- store replies (what a hostile server sends the client) ---- */
static void rep(buf *m, uint8_t op, uint8_t status, int64_t num, const char *body) {
  size_t bl = body ? strlen(body) : 0;
  rr__store_hdr h = {.magic = RR__STORE_REP_MAGIC,
                     .op = op,
                     .status = status,
                     .body_len = (uint32_t)bl,
                     .num = num};
  uint8_t w[RR__STORE_HDR];
  rr__store_hdr_encode(&h, w);
  put(m, w, sizeof w);
  if (bl) put(m, body, bl);
}

/* The server's side of the handshake: HELLO answered with a nonce and a MAC (all zero: a
 * client without a token checks nothing), AUTH accepted. */
static void challenge(buf *m) {
  rr__store_hdr h = {.magic = RR__STORE_REP_MAGIC,
                     .op = RR__SOP_HELLO,
                     .status = RR__SST_OK,
                     .body_len = RR__STORE_NONCE + RR__STORE_MAC,
                     .num = RR__STORE_VERSION};
  uint8_t w[RR__STORE_HDR + RR__STORE_NONCE + RR__STORE_MAC] = {0};
  rr__store_hdr_encode(&h, w);
  memcpy(w + RR__STORE_HDR, "seed-server-nonc", RR__STORE_NONCE);
  put(m, w, sizeof w);
  rep(m, RR__SOP_AUTH, RR__SST_OK, 0, NULL);
}

static void seeds_store_client(void) {
  buf m;
  /* Byte 0: bit 0 set, the client holds a token (and checks the server's MAC). */
  m = (buf){.n = 0};
  put8(&m, 0);
  challenge(&m);
  rep(&m, RR__SOP_GET, RR__SST_OK, 0, "value-of-k1");
  rep(&m, RR__SOP_ADD, RR__SST_OK, 5, NULL);
  rep(&m, RR__SOP_CHECK, RR__SST_OK, 1, NULL);
  rep(&m, RR__SOP_WAIT, RR__SST_OK, 0, NULL);
  rep(&m, RR__SOP_DELETE, RR__SST_OK, 1, NULL);
  rep(&m, RR__SOP_SET, RR__SST_OK, 0, NULL);
  rep(&m, RR__SOP_GET, RR__SST_OK, 0, "abc");
  save("store_client", "all_ok", &m);
  m = (buf){.n = 0};
  put8(&m, 0);
  challenge(&m);
  rep(&m, RR__SOP_GET, RR__SST_TIMEOUT, 0, NULL);
  rep(&m, RR__SOP_ADD, RR__SST_OVERFLOW, 0, NULL);
  rep(&m, RR__SOP_CHECK, RR__SST_OK, 0, NULL);
  rep(&m, RR__SOP_WAIT, RR__SST_TIMEOUT, 1, NULL);
  rep(&m, RR__SOP_DELETE, RR__SST_OK, 0, NULL);
  rep(&m, RR__SOP_SET, RR__SST_OK, 0, NULL);
  rep(&m, RR__SOP_GET, RR__SST_NOTINT, 0, NULL);
  save("store_client", "statuses", &m);
  m = (buf){.n = 0};
  put8(&m, 0);
  challenge(&m);
  rep(&m, RR__SOP_GET, RR__SST_FAILED, 0, "the store gave up\n\x01");
  save("store_client", "failed", &m);
  m = (buf){.n = 0};
  put8(&m, 0);
  rep(&m, RR__SOP_HELLO, RR__SST_DENIED, RR__STORE_VERSION, NULL);
  save("store_client", "denied", &m);
  m = (buf){.n = 0};
  put8(&m, 1);
  challenge(&m);
  save("store_client", "mac_wrong", &m);
  m = (buf){.n = 0};
  put8(&m, 0);
  challenge(&m);
  {
    rr__store_hdr h = {.magic = RR__STORE_REP_MAGIC, .op = RR__SOP_GET, .body_len = 1u << 20};
    uint8_t w[RR__STORE_HDR];
    rr__store_hdr_encode(&h, w);
    put(&m, w, sizeof w);
    put(&m, "short", 5);
  }
  save("store_client", "get_body_cut", &m);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  g_out = argv[1];
  if (mkdir(g_out, 0755) != 0 && errno != EEXIST) {
    perror(g_out);
    return 1;
  }
  seeds_wire();
  seeds_ctl_stream();
  seeds_store_server();
  seeds_store_client();
  return 0;
}

#include "ring/wire.h"

#include <stdio.h>
#include <string.h>

#include "common/status.h"

#define RR__HDR_MAGIC 0x31485252u   /* "RRH1" */
#define RR__CTL_MAGIC 0x31435252u   /* "RRC1" */
#define RR__HELLO_MAGIC 0x31425252u /* "RRB1" */
#define RR__WIRE_VERSION 1

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

const char *rr__kind_name(int kind) {
  static const char *names[RR__K_COUNT] = {"none",      "all_reduce", "reduce_scatter",
                                           "all_gather", "broadcast",  "reduce",
                                           "barrier",   "send/recv",  "completion"};
  return kind >= 0 && kind < RR__K_COUNT ? names[kind] : "unknown";
}

static const char *rr__algo_name(int algo) {
  switch (algo) {
    case RR__ALGO_RING: return "ring";
    case RR__ALGO_RD: return "recursive doubling";
    case RR__ALGO_CHAIN: return "chain";
    case RR__ALGO_DISSEM: return "dissemination";
    case RR__ALGO_STAR: return "star";
    default: return "-";
  }
}

/* Layout: magic(4) version(1) kind(1) dtype(1) op(1) algo(1) pad(3) root(4) from(4)
 *         seg_bytes(4) aux(4) seq(8) count(8) reserved(4) = 48 */
void rr__hdr_encode(const rr__hdr *h, uint8_t out[RR__HDR_BYTES]) {
  memset(out, 0, RR__HDR_BYTES);
  put32(out, RR__HDR_MAGIC);
  out[4] = RR__WIRE_VERSION;
  out[5] = h->kind;
  out[6] = h->dtype;
  out[7] = h->op;
  out[8] = h->algo;
  put32(out + 12, (uint32_t)h->root);
  put32(out + 16, (uint32_t)h->from);
  put32(out + 20, h->seg_bytes);
  put32(out + 24, h->aux);
  put64(out + 28, h->seq);
  put64(out + 36, h->count);
}

int rr__hdr_decode(const uint8_t in[RR__HDR_BYTES], rr__hdr *h) {
  uint32_t magic = get32(in);
  if (magic != RR__HDR_MAGIC)
    return rr__set_error(RR_EPROTO,
                         "expected a call header, got bytes %02x %02x %02x %02x (a stray or "
                         "foreign connection, or calls out of step)",
                         in[0], in[1], in[2], in[3]);
  if (in[4] != RR__WIRE_VERSION)
    return rr__set_error(RR_EPROTO, "peer speaks wire version %u, this build %u", in[4],
                         RR__WIRE_VERSION);
  h->kind = in[5];
  h->dtype = in[6];
  h->op = in[7];
  h->algo = in[8];
  h->root = (int32_t)get32(in + 12);
  h->from = (int32_t)get32(in + 16);
  h->seg_bytes = get32(in + 20);
  h->aux = get32(in + 24);
  h->seq = get64(in + 28);
  h->count = get64(in + 36);
  if (h->kind == RR__K_NONE || h->kind >= RR__K_COUNT || h->dtype >= RR_NUM_DTYPES ||
      h->op >= RR_NUM_OPS || in[9] || in[10] || in[11])
    return rr__set_error(RR_EPROTO, "malformed call header (kind %u dtype %u op %u)", h->kind,
                         h->dtype, h->op);
  return RR_OK;
}

const char *rr__hdr_describe(const rr__hdr *h, char *buf, size_t n) {
  const char *dt = rr_dtype_name((rr_dtype)h->dtype);
  switch (h->kind) {
    case RR__K_ALL_REDUCE:
    case RR__K_REDUCE_SCATTER:
      snprintf(buf, n, "%s #%llu (%llu x %s, %s, %s)", rr__kind_name(h->kind),
               (unsigned long long)h->seq, (unsigned long long)h->count, dt,
               rr_op_name((rr_op)h->op), rr__algo_name(h->algo));
      break;
    case RR__K_REDUCE:
      snprintf(buf, n, "reduce #%llu (%llu x %s, %s, root %d)", (unsigned long long)h->seq,
               (unsigned long long)h->count, dt, rr_op_name((rr_op)h->op), h->root);
      break;
    case RR__K_BROADCAST:
      snprintf(buf, n, "broadcast #%llu (%llu x %s, root %d)", (unsigned long long)h->seq,
               (unsigned long long)h->count, dt, h->root);
      break;
    case RR__K_ALL_GATHER:
      snprintf(buf, n, "all_gather #%llu (%llu x %s)", (unsigned long long)h->seq,
               (unsigned long long)h->count, dt);
      break;
    case RR__K_BARRIER:
      snprintf(buf, n, "barrier #%llu", (unsigned long long)h->seq);
      break;
    case RR__K_SEND:
      snprintf(buf, n, "send/recv #%llu of this pair (%llu x %s)", (unsigned long long)h->seq,
               (unsigned long long)h->count, dt);
      break;
    default:
      snprintf(buf, n, "%s #%llu", rr__kind_name(h->kind), (unsigned long long)h->seq);
  }
  return buf;
}

void rr__ctl_encode(const rr__ctl *c, uint8_t out[RR__CTL_FIXED]) {
  put32(out, RR__CTL_MAGIC);
  put32(out + 4, c->type);
  put32(out + 8, (uint32_t)c->origin);
  put32(out + 12, (uint32_t)c->status);
  put32(out + 16, c->len);
}

int rr__ctl_decode(const uint8_t in[RR__CTL_FIXED], rr__ctl *c) {
  if (get32(in) != RR__CTL_MAGIC)
    return rr__set_error(RR_EPROTO, "garbage on a control connection");
  c->type = get32(in + 4);
  c->origin = (int32_t)get32(in + 8);
  c->status = (int32_t)get32(in + 12);
  c->len = get32(in + 16);
  if ((c->type != RR__CTL_ABORT && c->type != RR__CTL_BYE) || c->len > RR__CTL_TEXT_MAX ||
      c->status > 0 || c->status < -1000)
    return rr__set_error(RR_EPROTO, "malformed control message (type %u, length %u)", c->type,
                         c->len);
  return RR_OK;
}

/* Layout: magic(4) version(4) group(48) from(4) to(4) index(4) nsockets(4) transport(16)
 *         token_hash(8) reserved(32) = 128 */
void rr__hello_encode(const rr__hello *h, uint8_t out[RR__HELLO_BYTES]) {
  memset(out, 0, RR__HELLO_BYTES);
  put32(out, RR__HELLO_MAGIC);
  put32(out + 4, RR__WIRE_VERSION);
  memcpy(out + 8, h->group, strnlen(h->group, RR__GROUP_ID_MAX - 1));
  put32(out + 56, (uint32_t)h->from);
  put32(out + 60, (uint32_t)h->to);
  put32(out + 64, (uint32_t)h->index);
  put32(out + 68, (uint32_t)h->nsockets);
  memcpy(out + 72, h->transport, strnlen(h->transport, sizeof h->transport - 1));
  put64(out + 88, h->token_hash);
}

int rr__hello_decode(const uint8_t in[RR__HELLO_BYTES], rr__hello *h) {
  if (get32(in) != RR__HELLO_MAGIC)
    return rr__set_error(RR_EPROTO, "not a ringreduce peer (bad greeting)");
  if (get32(in + 4) != RR__WIRE_VERSION)
    return rr__set_error(RR_EPROTO, "peer speaks wire version %u, this build %u",
                         get32(in + 4), RR__WIRE_VERSION);
  memcpy(h->group, in + 8, RR__GROUP_ID_MAX);
  h->group[RR__GROUP_ID_MAX - 1] = '\0';
  h->from = (int32_t)get32(in + 56);
  h->to = (int32_t)get32(in + 60);
  h->index = (int32_t)get32(in + 64);
  h->nsockets = (int32_t)get32(in + 68);
  memcpy(h->transport, in + 72, sizeof h->transport);
  h->transport[sizeof h->transport - 1] = '\0';
  h->token_hash = get64(in + 88);
  if (h->from < 0 || h->to < 0 || h->index < 0 || h->nsockets < 1 || h->nsockets > 64 ||
      h->index >= h->nsockets)
    return rr__set_error(RR_EPROTO, "malformed greeting (from %d to %d socket %d of %d)",
                         h->from, h->to, h->index, h->nsockets);
  return RR_OK;
}

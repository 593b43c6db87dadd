#include "ring/hdr.h"

#include <stdio.h>
#include <string.h>

#include "common/bytes.h"
#include "common/status.h"

#define RR__HDR_MAGIC 0x31485252u /* "RRH1" */
#define RR__HDR_VERSION 1

static const char *rr__algo_name(int algo) {
  switch (algo) {
#define RR__ALGO_LONG(name, short_name, long_name) \
  case RR__ALGO_##name:                            \
    return long_name;
    RR__ALGO_MAP(RR__ALGO_LONG)
#undef RR__ALGO_LONG
    default: return "-";
  }
}

/* Layout: magic(4) version(1) kind(1) dtype(1) op(1) algo(1) pad(3) root(4) from(4)
 *         seg_bytes(4) aux(4) seq(8) count(8) reserved(4) = 48 */
void rr__hdr_encode(const rr__hdr *h, uint8_t out[RR__HDR_BYTES]) {
  memset(out, 0, RR__HDR_BYTES);
  rr__put_u32(out, RR__HDR_MAGIC);
  out[4] = RR__HDR_VERSION;
  out[5] = h->kind;
  out[6] = h->dtype;
  out[7] = h->op;
  out[8] = h->algo;
  rr__put_u32(out + 12, (uint32_t)h->root);
  rr__put_u32(out + 16, (uint32_t)h->from);
  rr__put_u32(out + 20, h->seg_bytes);
  rr__put_u32(out + 24, h->aux);
  rr__put_u64(out + 28, h->seq);
  rr__put_u64(out + 36, h->count);
}

int rr__hdr_decode(const uint8_t in[RR__HDR_BYTES], rr__hdr *h) {
  uint32_t magic = rr__get_u32(in);
  if (magic != RR__HDR_MAGIC)
    return rr__set_error(RR_EPROTO,
                         "expected a call header, got bytes %02x %02x %02x %02x (a stray or "
                         "foreign connection, or calls out of step)",
                         in[0], in[1], in[2], in[3]);
  if (in[4] != RR__HDR_VERSION)
    return rr__set_error(RR_EPROTO, "peer speaks wire version %u, this build %u", in[4],
                         RR__HDR_VERSION);
  h->kind = in[5];
  h->dtype = in[6];
  h->op = in[7];
  h->algo = in[8];
  h->root = (int32_t)rr__get_u32(in + 12);
  h->from = (int32_t)rr__get_u32(in + 16);
  h->seg_bytes = rr__get_u32(in + 20);
  h->aux = rr__get_u32(in + 24);
  h->seq = rr__get_u64(in + 28);
  h->count = rr__get_u64(in + 36);
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
    case RR__K_GATHER:
    case RR__K_SCATTER:
      snprintf(buf, n, "%s #%llu (%llu x %s per rank, root %d)", rr__kind_name(h->kind),
               (unsigned long long)h->seq, (unsigned long long)h->count, dt, h->root);
      break;
    case RR__K_ALL_TO_ALL:
      snprintf(buf, n, "all_to_all #%llu (%llu x %s per rank)", (unsigned long long)h->seq,
               (unsigned long long)h->count, dt);
      break;
    case RR__K_ALL_TO_ALLV: /* the count is that of one pair: the sender's to the receiver */
      snprintf(buf, n, "all_to_allv #%llu (%s, %llu on this pair)", (unsigned long long)h->seq,
               dt, (unsigned long long)h->count);
      break;
    case RR__K_BARRIER:
      snprintf(buf, n, "barrier #%llu", (unsigned long long)h->seq);
      break;
    case RR__K_ACK: /* not a call: the notice names only the number of the call it ends */
      snprintf(buf, n, "the completion notice of call #%llu", (unsigned long long)h->seq);
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

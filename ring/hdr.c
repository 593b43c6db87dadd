#include "ring/hdr.h"

#include <stdio.h>
#include <string.h>

#include "common/bytes.h"
#include "common/status.h"

#define RR__HDR_MAGIC 0x31485252u /* "RRH1" */
#define RR__HDR_VERSION 1

/* Layout: magic(4) version(1) kind(1) dtype(1) op(1) algo(1) handoff(1) pad(2) root(4) from(4)
 *         seg_bytes(4) aux(4) seq(8) count(8) reserved(4) = 48 */
void rr__hdr_encode(const rr__hdr *h, uint8_t out[RR__HDR_BYTES]) {
  memset(out, 0, RR__HDR_BYTES);
  rr__put_u32(out, RR__HDR_MAGIC);
  out[4] = RR__HDR_VERSION;
  out[5] = h->kind;
  out[6] = h->dtype;
  out[7] = h->op;
  out[8] = h->algo;
  out[9] = h->handoff;
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
  h->handoff = in[9];
  h->root = (int32_t)rr__get_u32(in + 12);
  h->from = (int32_t)rr__get_u32(in + 16);
  h->seg_bytes = rr__get_u32(in + 20);
  h->aux = rr__get_u32(in + 24);
  h->seq = rr__get_u64(in + 28);
  h->count = rr__get_u64(in + 36);
  if (h->kind == RR__K_NONE || h->kind >= RR__K_COUNT || h->dtype >= RR_NUM_DTYPES ||
      h->op >= RR_NUM_OPS || in[9] > RR__HDR_MEMOPS || in[10] || in[11])
    return rr__set_error(RR_EPROTO, "malformed call header (kind %u dtype %u op %u)", h->kind,
                         h->dtype, h->op);
  return RR_OK;
}

/* The kind's desc column with the header's fields (ring/kind.h); a kind that never travels
 * in a header has none, and is named with its number. */
const char *rr__hdr_describe(const rr__hdr *h, char *buf, size_t n) {
  const rr__kind_vals v = {.kind = rr__kind_name(h->kind),
                           .dtype = rr_dtype_name((rr_dtype)h->dtype),
                           .op = rr_op_name((rr_op)h->op),
                           .algo = rr__algo(h->algo)->long_name,
                           .seq = h->seq,
                           .count = h->count,
                           .root = h->root};
  const char *desc = rr__kind(h->kind)->desc;
  return rr__kind_format(buf, n, desc ? desc : "{kind} #{seq}", &v);
}

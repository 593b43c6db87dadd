/* The InfiniBand transport's pieces, shared by its files:
 *   verbs.c  loading libibverbs (verbs.h)
 *   dev.c    choosing the device, port and GID once per process (RR_IB_HCA)
 *   ib.c     the lanes: queue pairs, the slot rings, the credits
 * docs/ib.md describes the protocol and what has and has not been verified. */
#ifndef RR__TRANSPORT_IB_IB_H_
#define RR__TRANSPORT_IB_IB_H_

#include <stdint.h>

#include "transport/ib/verbs.h"

/* The port this process uses for every InfiniBand lane. */
typedef struct rr__ib_dev {
  const rr__ibv *v;
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  char name[64];
  uint8_t port;
  int roce;      /* link layer Ethernet: address by GID (RoCE v2) */
  uint16_t lid;  /* InfiniBand: the port's LID */
  int gid_index; /* RoCE: the GID table entry used */
  union ibv_gid gid;
  enum ibv_mtu mtu;     /* the port's active MTU */
  uint8_t speed, width; /* active_speed / active_width, for the link rate */
} rr__ib_dev;

/* The chosen port, opened once per process; NULL when there is none (the reason is logged
 * at RR_DEBUG=INFO, and kept for rr__ib_why). Never called when RR_TRANSPORT=tcp. */
const rr__ib_dev *rr__ib_device(void);
/* Why rr__ib_device() found nothing ("" when it found a port). */
const char *rr__ib_why(void);
/* Does `name`:`port` pass the RR_IB_HCA filter `spec` (prefix list, ^ exclude, = exact,
 * name:port)? Exposed for the unit test. */
int rr__ib_hca_match(const char *spec, const char *name, int port);
/* Link rate of the chosen port in Gbit/s (width x lane speed), 0 if unknown. */
double rr__ib_link_gbps(const rr__ib_dev *d);

#endif /* RR__TRANSPORT_IB_IB_H_ */

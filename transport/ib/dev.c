/* Device, port and GID choice for the InfiniBand transport, once per process.
 *
 * RR_IB_HCA follows NCCL_IB_HCA: a comma-separated list of device names, each optionally
 * ":port"; names match as prefixes unless the list starts with '=' (exact), and a list
 * starting with '^' (or "^=") excludes what it names instead. Only ports in the ACTIVE
 * state count. The first device (in ibv_get_device_list order) and port that pass is used
 * for every lane of this process.
 *
 * Link layer InfiniBand: peers are addressed by LID. Ethernet (RoCE): by GID, from
 * RR_IB_GID_INDEX, or else the first RoCE v2 entry of the port's GID table that holds an
 * IPv4-mapped address, then the first global (non link-local) IPv6 one, as NCCL's default
 * address family search does. RoCE v2 is read from sysfs (gid_attrs/types), as NCCL does;
 * where sysfs has no such file (the test fake) the entry is taken on its address alone. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/param.h"
#include "common/status.h"
#include "transport/ib/ib.h"

static rr__ib_dev rr__dev;
static int rr__dev_ok;
static char rr__dev_why[512];
static pthread_once_t rr__dev_once = PTHREAD_ONCE_INIT;

int rr__ib_hca_match(const char *spec, const char *name, int port) {
  if (!spec || !spec[0]) return 1;
  int exclude = 0, exact = 0;
  if (*spec == '^') exclude = 1, spec++;
  if (*spec == '=') exact = 1, spec++;
  int hit = 0;
  while (*spec && !hit) {
    size_t n = strcspn(spec, ",");
    char ent[96];
    snprintf(ent, sizeof ent, "%.*s", (int)(n < sizeof ent ? n : sizeof ent - 1), spec);
    spec += n + (spec[n] == ',');
    int want_port = -1;
    char *colon = strchr(ent, ':');
    if (colon) {
      *colon = '\0';
      want_port = atoi(colon + 1);
    }
    if (!ent[0]) continue;
    int name_ok = exact ? strcmp(ent, name) == 0 : strncmp(ent, name, strlen(ent)) == 0;
    hit = name_ok && (want_port < 0 || want_port == port);
  }
  return exclude ? !hit : hit;
}

/* Is GID table entry `idx` of the port RoCE v2 ("RoCE v2" in sysfs)? -1: unknown. */
static int rr__gid_is_v2(const char *dev, int port, int idx) {
  char path[256], buf[32] = "";
  snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d", dev, port,
           idx);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int ok = fgets(buf, sizeof buf, f) != NULL;
  fclose(f);
  return ok && strstr(buf, "v2") != NULL;
}

static int rr__gid_zero(const union ibv_gid *g) {
  static const uint8_t z[16];
  return memcmp(g->raw, z, 16) == 0;
}

static int rr__gid_v4mapped(const union ibv_gid *g) {
  static const uint8_t p[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g->raw, p, 12) == 0;
}

/* Pick the GID entry of a RoCE port; -1 with rr__dev_why set when none fits. */
static int rr__pick_gid(const rr__ibv *v, struct ibv_context *ctx, const char *dev, int port,
                        int tbl_len, union ibv_gid *out) {
  int forced = (int)rr__params_get()->ib_gid_index;
  if (forced >= 0) {
    if (forced >= tbl_len || v->query_gid(ctx, (uint8_t)port, forced, out) != 0 ||
        rr__gid_zero(out)) {
      snprintf(rr__dev_why, sizeof rr__dev_why, "%s:%d: RR_IB_GID_INDEX=%d is not a valid GID", dev,
               port, forced);
      return -1;
    }
    return forced;
  }
  int best = -1, best_rank = 0;
  for (int i = 0; i < tbl_len; i++) {
    union ibv_gid g;
    if (v->query_gid(ctx, (uint8_t)port, i, &g) != 0 || rr__gid_zero(&g)) continue;
    if (rr__gid_is_v2(dev, port, i) == 0) continue; /* RoCE v1: not routable, skip */
    int link_local = g.raw[0] == 0xfe && (g.raw[1] & 0xc0) == 0x80;
    int rank = rr__gid_v4mapped(&g) ? 2 : link_local ? 0 : 1;
    if (rank > best_rank) best = i, best_rank = rank, *out = g;
    if (rank == 2) break;
  }
  if (best < 0)
    snprintf(rr__dev_why, sizeof rr__dev_why,
             "%s:%d is RoCE but has no RoCE v2 GID with an IPv4 or global IPv6 address (set "
             "RR_IB_GID_INDEX)",
             dev, port);
  return best;
}

/* Try one port; 1 and rr__dev filled when it is usable. */
static int rr__try_port(const rr__ibv *v, struct ibv_context *ctx, const char *dev, int port) {
  const char *spec = rr__params_get()->ib_hca;
  if (!rr__ib_hca_match(spec, dev, port)) {
    snprintf(rr__dev_why, sizeof rr__dev_why, "%s:%d excluded by RR_IB_HCA='%s'", dev, port, spec);
    return 0;
  }
  struct ibv_port_attr pa;
  memset(&pa, 0, sizeof pa);
  if (v->query_port(ctx, (uint8_t)port, &pa) != 0) {
    snprintf(rr__dev_why, sizeof rr__dev_why, "ibv_query_port(%s, %d) failed", dev, port);
    return 0;
  }
  if (pa.state != IBV_PORT_ACTIVE) {
    snprintf(rr__dev_why, sizeof rr__dev_why, "%s:%d is not ACTIVE (state %d)", dev, port,
             (int)pa.state);
    return 0;
  }
  rr__ib_dev *d = &rr__dev;
  memset(d, 0, sizeof *d);
  d->roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
  if (d->roce) {
    d->gid_index = rr__pick_gid(v, ctx, dev, port, pa.gid_tbl_len, &d->gid);
    if (d->gid_index < 0) return 0;
  } else if (pa.lid == 0) {
    snprintf(rr__dev_why, sizeof rr__dev_why, "%s:%d has no LID (no subnet manager?)", dev, port);
    return 0;
  }
  d->lid = pa.lid;
  d->port = (uint8_t)port;
  d->mtu = pa.active_mtu;
  d->speed = pa.active_speed;
  d->width = pa.active_width;
  snprintf(d->name, sizeof d->name, "%s", dev);
  return 1;
}

static void rr__dev_open(void) {
  const rr__ibv *v;
  if (rr__ibv_load(&v) != RR_OK) {
    snprintf(rr__dev_why, sizeof rr__dev_why, "%s", rr__error());
    return;
  }
  int n = 0;
  struct ibv_device **list = v->get_device_list(&n);
  if (!list || n == 0) {
    snprintf(rr__dev_why, sizeof rr__dev_why,
             "ibv_get_device_list found no RDMA device (no hardware, or no kernel support)");
    if (list) v->free_device_list(list);
    return;
  }
  for (int i = 0; i < n && !rr__dev_ok; i++) {
    const char *name = v->get_device_name(list[i]);
    struct ibv_context *ctx = v->open_device(list[i]);
    if (!ctx) {
      snprintf(rr__dev_why, sizeof rr__dev_why, "ibv_open_device(%s) failed", name ? name : "?");
      continue;
    }
    struct ibv_device_attr da;
    memset(&da, 0, sizeof da);
    int ports = v->query_device(ctx, &da) == 0 ? da.phys_port_cnt : 0;
    for (int p = 1; p <= ports && !rr__dev_ok; p++) {
      if (!rr__try_port(v, ctx, name, p)) {
        RR__LOG_INFO(RR__SUB_INIT, "ib: skipping %s", rr__dev_why);
        continue;
      }
      struct ibv_pd *pd = v->alloc_pd(ctx);
      if (!pd) {
        snprintf(rr__dev_why, sizeof rr__dev_why, "ibv_alloc_pd(%s) failed", name);
        break;
      }
      rr__dev.v = v;
      rr__dev.ctx = ctx;
      rr__dev.pd = pd;
      rr__dev_ok = 1;
    }
    /* The context of the chosen device stays open for the life of the process. */
    if (!rr__dev_ok) v->close_device(ctx);
  }
  v->free_device_list(list);
  if (!rr__dev_ok) return;
  rr__dev_why[0] = '\0';
  RR__LOG_INFO(RR__SUB_INIT, "ib: using %s port %u (%s, %s %u, MTU %d, %.0f Gbit/s)", rr__dev.name,
               rr__dev.port, rr__dev.roce ? "RoCE" : "InfiniBand",
               rr__dev.roce ? "GID index" : "LID",
               rr__dev.roce ? (unsigned)rr__dev.gid_index : rr__dev.lid, 128 << rr__dev.mtu,
               rr__ib_link_gbps(&rr__dev));
}

const rr__ib_dev *rr__ib_device(void) {
  pthread_once(&rr__dev_once, rr__dev_open);
  if (!rr__dev_ok) {
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
      RR__LOG_INFO(RR__SUB_INIT, "ib: not used: %s", rr__dev_why);
    return NULL;
  }
  return &rr__dev;
}

const char *rr__ib_why(void) {
  return rr__dev_why;
}

double rr__ib_link_gbps(const rr__ib_dev *d) {
  /* ibv_query_port(3): active_width 1,2,4,8,16 = 1x,4x,8x,12x,2x; active_speed codes
   * 1 SDR 2.5, 2 DDR 5, 4 QDR 10 / FDR10, 8 FDR10 10.3125, 16 FDR 14.0625, 32 EDR 25.78125,
   * 64 HDR 53.125, 128 NDR 106.25 (Gbit/s per lane, signalling rate). */
  double lanes = d->width == 1    ? 1
                 : d->width == 2  ? 4
                 : d->width == 4  ? 8
                 : d->width == 8  ? 12
                 : d->width == 16 ? 2
                                  : 0;
  double gbps = d->speed == 1     ? 2.5
                : d->speed == 2   ? 5
                : d->speed == 4   ? 10
                : d->speed == 8   ? 10.3125
                : d->speed == 16  ? 14.0625
                : d->speed == 32  ? 25.78125
                : d->speed == 64  ? 53.125
                : d->speed == 128 ? 106.25
                                  : 0;
  return lanes * gbps;
}

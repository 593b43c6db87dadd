/*
 * Rank 0's output: nccl-tests' table (the printf formats of its src/common.cu, so scripts
 * that parse nccl-tests parse this), the extra columns after the standard ones when asked,
 * a trailing section of "#" lines only when there is something to add, and the JSON file.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <math.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "perf_report.h"

/* ---------------------------------------------------------------------------------------
 * The link: which interface carries the traffic, and its speed. */

static int sysfs_speed(const char *ifname, double *gbps) {
  char path[128];
  snprintf(path, sizeof path, "/sys/class/net/%s/speed", ifname);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  long mbps = -1;
  int ok = fscanf(f, "%ld", &mbps) == 1;
  fclose(f);
  if (!ok || mbps <= 0) return 0; /* -1: virtual device or link down */
  *gbps = (double)mbps / 1000.0;
  return 1;
}

/* The interface the kernel would route to `host` through: connect a UDP socket (which sends
 * nothing) and find the interface holding its local address. */
static int route_ifname(const char *host, char *ifname, size_t len, int *loopback) {
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(host, "9", &hints, &ai) != 0 || !ai) return 0;
  int found = 0;
  int fd = socket(ai->ai_family, SOCK_DGRAM, 0);
  struct sockaddr_storage me;
  socklen_t mlen = sizeof me;
  struct ifaddrs *ifs = NULL;
  if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
      getsockname(fd, (struct sockaddr *)&me, &mlen) == 0 && getifaddrs(&ifs) == 0) {
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != me.ss_family) continue;
      if (me.ss_family == AF_INET)
        found = !memcmp(&((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr,
                        &((struct sockaddr_in *)(void *)&me)->sin_addr, sizeof(struct in_addr));
      else if (me.ss_family == AF_INET6)
        found = !memcmp(&((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr,
                        &((struct sockaddr_in6 *)(void *)&me)->sin6_addr, sizeof(struct in6_addr));
      if (found) {
        snprintf(ifname, len, "%s", i->ifa_name);
        *loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
      }
    }
    freeifaddrs(ifs);
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(ai);
  return found;
}

/* Speed of the interface carrying the traffic, or why it is not known. */
static void detect_link(perf_report *r) {
  int one_host = 1;
  for (int i = 1; i < r->nranks; i++)
    if (strcmp(r->ranks[i].host, r->ranks[0].host) != 0) one_host = 0;
  if (one_host) {
    /* Loopback or not, traffic between ranks of one host never reaches a NIC. */
    snprintf(r->link_src, sizeof r->link_src, "unknown: every rank is on one host");
    return;
  }
  char ifname[64] = "";
  int loopback = 0;
  /* RR_SOCKET_IFNAME naming one interface (NCCL syntax: "eth0" or "=eth0") is where the
   * data sockets go; otherwise the route to the master is taken as the data's route. */
  const char *env = getenv("RR_SOCKET_IFNAME");
  if (env && *env && !strpbrk(env, ",^")) {
    char probe[128];
    snprintf(ifname, sizeof ifname, "%s", env[0] == '=' ? env + 1 : env);
    snprintf(probe, sizeof probe, "/sys/class/net/%s", ifname);
    if (access(probe, F_OK) != 0) ifname[0] = '\0';
  }
  const char *master = getenv("MASTER_ADDR");
  if (!ifname[0] && !(master && route_ifname(master, ifname, sizeof ifname, &loopback))) {
    snprintf(r->link_src, sizeof r->link_src, "unknown: no route to MASTER_ADDR found");
    return;
  }
  if (loopback) {
    snprintf(r->link_src, sizeof r->link_src, "unknown: traffic goes over loopback (%s)", ifname);
    return;
  }
  if (!sysfs_speed(ifname, &r->link_gbps)) {
    snprintf(r->link_src, sizeof r->link_src, "unknown: /sys/class/net/%s/speed gives none",
             ifname);
    return;
  }
  snprintf(r->link_src, sizeof r->link_src, "%s, from /sys/class/net/%s/speed", ifname, ifname);
}

void perf_report_link(perf_report *r) {
  if (r->o->link_gbps > 0) {
    r->link_gbps = r->o->link_gbps;
    snprintf(r->link_src, sizeof r->link_src, "from --link-gbps");
    r->link_column = 1;
    return;
  }
  detect_link(r);
  r->link_column = r->o->link_auto;
}

/* ---------------------------------------------------------------------------------------
 * JSON. */

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

/* JSON has no NaN or infinity. */
static void json_num(FILE *f, double v) {
  if (isfinite(v))
    fprintf(f, "%.6g", v);
  else
    fputs("null", f);
}

static void json_wrong(FILE *f, int64_t wrong) {
  if (wrong < 0)
    fputs("null", f);
  else
    fprintf(f, "%" PRId64, wrong);
}

static void json_header(perf_report *r) {
  FILE *f = r->json;
  const perf_opts *o = r->o;
  static const char *agg_names[] = {"rank0", "avg", "min", "max"};
  fprintf(f, "{\n  \"tool\": ");
  json_str(f, r->tool);
  fprintf(f, ",\n  \"version\": \"%d.%d.%d\",\n", RR_VERSION_MAJOR, RR_VERSION_MINOR,
          RR_VERSION_PATCH);
  fprintf(f,
          "  \"options\": {\"nranks\": %d, \"minbytes\": %zu, \"maxbytes\": %zu, "
          "\"stepbytes\": %zu, \"stepfactor\": %zu, \"iters\": %d, \"warmup_iters\": %d, "
          "\"check\": %d, \"datatype\": \"%s\", \"op\": \"%s\", \"root\": %d, "
          "\"average\": \"%s\", \"link_gbps\": ",
          r->nranks, o->minbytes, o->maxbytes, o->stepbytes, o->stepfactor, o->iters, o->warmup,
          o->check, o->all_dtypes ? "all" : rr_dtype_name(o->dtype),
          !r->coll->reduces ? "none"
          : o->all_ops      ? "all"
                            : rr_op_name(o->op),
          o->root, agg_names[o->agg]);
  json_num(f, r->link_gbps > 0 ? r->link_gbps : NAN);
  fprintf(f, ", \"link\": ");
  json_str(f, r->link_src);
  fprintf(f, ", \"percentiles\": %s, \"split\": %s},\n", o->percentiles ? "true" : "false",
          o->split ? "true" : "false");
  fprintf(f, "  \"ranks\": [");
  for (int i = 0; i < r->nranks; i++) {
    fprintf(f, "%s{\"rank\": %d, \"pid\": %d, \"host\": ", i ? ", " : "", i, (int)r->ranks[i].pid);
    json_str(f, r->ranks[i].host);
    fprintf(f, ", \"device\": %d}", (int)r->ranks[i].device);
  }
  fprintf(f, "],\n  \"rows\": [");
}

static double link_pct(const perf_report *r, double busbw) {
  return r->link_gbps > 0 ? busbw * 8.0 / r->link_gbps * 100.0 : NAN; /* GB/s -> Gbit/s */
}

static void json_half(const perf_report *r, FILE *f, const char *name, const perf_half *h) {
  fprintf(f, "\"%s\": {\"time_us\": ", name);
  json_num(f, h->time_us);
  fprintf(f, ", \"algbw_GBps\": ");
  json_num(f, h->algbw);
  fprintf(f, ", \"busbw_GBps\": ");
  json_num(f, h->busbw);
  fprintf(f, ", \"wrong\": ");
  json_wrong(f, h->wrong);
  fprintf(f, ", \"p50_us\": ");
  json_num(f, h->have_pct ? h->p50_us : NAN);
  fprintf(f, ", \"p99_us\": ");
  json_num(f, h->have_pct ? h->p99_us : NAN);
  fprintf(f, ", \"link_pct\": ");
  json_num(f, link_pct(r, h->busbw));
  fprintf(f, "}");
}

static void json_row(perf_report *r, const perf_row *row) {
  FILE *f = r->json;
  fprintf(f,
          "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", "
          "\"root\": %d, ",
          r->json_rows++ ? "," : "", row->bytes, row->count, rr_dtype_name(row->dtype), row->op,
          row->root);
  json_half(r, f, "out_of_place", &row->half[0]);
  fprintf(f, ", ");
  json_half(r, f, "in_place", &row->half[1]);
  if (r->o->split) {
    const perf_split *sp = &row->split;
    fprintf(f, ", \"split\": {\"rs_us\": ");
    json_num(f, sp->valid ? sp->rs_us : NAN);
    fprintf(f, ", \"ag_us\": ");
    json_num(f, sp->valid ? sp->ag_us : NAN);
    fprintf(f, ", \"rs_busbw_GBps\": ");
    json_num(f, sp->valid ? sp->rs_busbw : NAN);
    fprintf(f, ", \"ag_busbw_GBps\": ");
    json_num(f, sp->valid ? sp->ag_busbw : NAN);
    fprintf(f, ", \"wrong\": ");
    json_wrong(f, sp->valid ? sp->wrong : -1);
    fprintf(f, "}");
  }
  fprintf(f, "}");
  fflush(f);
}

/* ---------------------------------------------------------------------------------------
 * The table. */

/* nccl-tests' time column: 7 characters, fewer decimals as the time grows. */
static void fmt_time(char *buf, size_t len, double us) {
  if (us >= 10000.0)
    snprintf(buf, len, "%7.0f", us);
  else if (us >= 100.0)
    snprintf(buf, len, "%7.1f", us);
  else
    snprintf(buf, len, "%7.2f", us);
}

static void fmt_wrong(char *buf, size_t len, int64_t wrong) {
  if (wrong < 0)
    snprintf(buf, len, "N/A");
  else
    snprintf(buf, len, "%" PRId64, wrong);
}

void perf_report_header(perf_report *r) {
  const perf_opts *o = r->o;
  printf("# nccl-tests style: %s (ringreduce %d.%d.%d)\n", r->tool, RR_VERSION_MAJOR,
         RR_VERSION_MINOR, RR_VERSION_PATCH);
  printf(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "agg iters: 1 validation: %d graph: 0\n",
      r->header_min, r->header_max, o->stepfactor > 1 ? o->stepfactor : o->stepbytes,
      o->stepfactor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->check);
  printf("#\n# Using devices\n");
  for (int i = 0; i < r->nranks; i++)
    printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s]\n", i, 0, (int)r->ranks[i].pid,
           r->ranks[i].host, (int)r->ranks[i].device, r->ranks[i].cuda ? "cuda" : "cpu");
  if (r->reduced_max)
    printf("#\n# Reducing maxBytes to %zu due to memory limitation\n", r->reduced_max);
  printf("#\n");

  /* The three column-header lines, then each extra group's part of them. */
  char meta[512], names[512], units[512];
  int m = snprintf(meta, sizeof meta,
                   "# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
                   "in-place          ",
                   "", "", "", "", "");
  int n = snprintf(names, sizeof names,
                   "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s", "size",
                   "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                   "algbw", "busbw", "#wrong");
  int u = snprintf(units, sizeof units,
                   "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s", "(B)",
                   "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                   "(GB/s)", "");
  if (r->link_column) {
    m += snprintf(meta + m, sizeof meta - (size_t)m, "  %-14s", "% link out/in");
    n += snprintf(names + n, sizeof names - (size_t)n, "  %6s  %6s", "%link", "%link");
    u += snprintf(units + u, sizeof units - (size_t)u, "  %6s  %6s", "(%)", "(%)");
  }
  if (o->percentiles) {
    m += snprintf(meta + m, sizeof meta - (size_t)m, "  %-34s",
                  "percentiles out-of-place, in-place");
    n += snprintf(names + n, sizeof names - (size_t)n, "  %7s  %7s  %7s  %7s", "p50", "p99", "p50",
                  "p99");
    u += snprintf(units + u, sizeof units - (size_t)u, "  %7s  %7s  %7s  %7s", "(us)", "(us)",
                  "(us)", "(us)");
  }
  if (o->split) {
    m += snprintf(meta + m, sizeof meta - (size_t)m, "  %-23s", "split: rs + ag");
    n += snprintf(names + n, sizeof names - (size_t)n, "  %7s  %7s %6s", "rs", "ag", "#wrong");
    u += snprintf(units + u, sizeof units - (size_t)u, "  %7s  %7s  %5s", "(us)", "(us)", "");
  }
  printf("%s\n%s\n%s\n", meta, names, units);
  if (r->json) json_header(r);
}

void perf_report_row(perf_report *r, const perf_row *row) {
  char t[32], w[32];
  printf("%12zu  %12zu  %8s  %6s  %6i", row->bytes, row->count, rr_dtype_name(row->dtype), row->op,
         row->root);
  for (int i = 0; i < 2; i++) {
    const perf_half *h = &row->half[i];
    fmt_time(t, sizeof t, h->time_us);
    fmt_wrong(w, sizeof w, h->wrong);
    printf("  %7s  %6.2f  %6.2f  %5s", t, h->algbw, h->busbw, w);
    /* Footer totals, as nccl-tests: busbw averaged over every half of every row. */
    r->bw_sum += h->busbw;
    r->bw_count++;
    if (h->busbw > r->best_busbw) r->best_busbw = h->busbw;
    if (h->wrong > 0) r->wrong_total += h->wrong;
  }
  if (r->link_column)
    for (int i = 0; i < 2; i++) {
      if (r->link_gbps > 0)
        printf("  %6.1f", link_pct(r, row->half[i].busbw));
      else
        printf("  %6s", "N/A");
    }
  if (r->o->percentiles)
    for (int i = 0; i < 2; i++) {
      fmt_time(t, sizeof t, row->half[i].p50_us);
      fmt_time(w, sizeof w, row->half[i].p99_us);
      printf("  %7s  %7s", t, w);
    }
  if (r->o->split) {
    const perf_split *sp = &row->split;
    char a[32];
    if (sp->valid) {
      fmt_time(t, sizeof t, sp->rs_us);
      fmt_time(a, sizeof a, sp->ag_us);
    } else {
      snprintf(t, sizeof t, "N/A");
      snprintf(a, sizeof a, "N/A");
    }
    fmt_wrong(w, sizeof w, sp->valid ? sp->wrong : -1);
    printf("  %7s  %7s  %5s", t, a, w);
    if (sp->valid && sp->wrong > 0) r->wrong_total += sp->wrong;
  }
  printf("\n");
  if (r->json) json_row(r, row);
}

int perf_report_footer(perf_report *r) {
  double avg = r->bw_count ? r->bw_sum / r->bw_count : 0.0;
  /* nccl-tests' NCCL_TESTS_MIN_BW: fail a run whose average busbw is below 90% of it. */
  const char *env = getenv("NCCL_TESTS_MIN_BW");
  double min_bw = env ? atof(env) : -1;
  int bw_failed = min_bw != -1 && avg < min_bw * 0.9;
  printf("# Out of bounds values : %" PRId64 " %s\n", r->wrong_total,
         r->wrong_total ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g %s\n", avg, min_bw == -1 ? "" : bw_failed ? "FAILED" : "OK");
  printf("#\n");

  /* The trailing section: only what nccl-tests has no place for. */
  int trailing = 0;
  if (r->link_gbps > 0) {
    printf("# Link: %g Gbit/s (%s): best busbw %.2f GB/s = %.1f%% of it\n", r->link_gbps,
           r->link_src, r->best_busbw, link_pct(r, r->best_busbw));
    trailing = 1;
  } else if (r->link_column) {
    printf("# Link: speed %s\n", r->link_src);
    trailing = 1;
  }
  if (r->coll->note) {
    printf("# %s\n", r->coll->note);
    trailing = 1;
  }
  if (trailing) printf("#\n");

  if (r->json) {
    fprintf(r->json,
            "\n  ],\n  \"out_of_bounds\": %" PRId64 ",\n  \"avg_busbw_GBps\": ", r->wrong_total);
    json_num(r->json, avg);
    fprintf(r->json, ",\n  \"status\": \"%s\"\n}\n", r->wrong_total || bw_failed ? "FAILED" : "OK");
    if (fclose(r->json) != 0) {
      perror(r->o->json);
      return 1;
    }
    r->json = NULL;
  }
  fflush(stdout);
  return r->wrong_total > 0 || bw_failed;
}

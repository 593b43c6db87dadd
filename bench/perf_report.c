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
#include <time.h>
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
 * Per-iteration statistics (-I), by nccl-tests' rules so that the figures compare: p50 is
 * the element at n/2 of the sorted times, p95 and p99 the nearest rank (index
 * min(n-1, ceil(n p / 100) - 1)), the standard deviation that of the whole population. */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double nearest_rank(const double *sorted, int n, int pct) {
  int i = (n * pct + 99) / 100 - 1;
  return sorted[i < n - 1 ? i : n - 1];
}

void perf_iter_stats_of(const double *times, int n, int skip, double *scratch,
                        perf_iter_stats *st) {
  const double *t = times + skip;
  n -= skip; /* the options keep skip < n */
  memcpy(scratch, t, (size_t)n * sizeof *scratch);
  qsort(scratch, (size_t)n, sizeof *scratch, cmp_double);
  double sum = 0, var = 0;
  for (int i = 0; i < n; i++) sum += scratch[i];
  st->avg = sum / n;
  for (int i = 0; i < n; i++) var += (scratch[i] - st->avg) * (scratch[i] - st->avg);
  st->stdev = sqrt(var / n);
  st->cv_pct = st->avg > 0 ? st->stdev / st->avg * 100.0 : 0.0;
  st->min = scratch[0];
  st->max = scratch[n - 1];
  st->p50 = scratch[n / 2];
  st->p95 = nearest_rank(scratch, n, 95);
  st->p99 = nearest_rank(scratch, n, 99);
}

/* ---------------------------------------------------------------------------------------
 * JSON: nccl-tests' document (its JSON_FILE_VERSION 3, as 2.19 writes it), key for key, so
 * that a script written for nccl-tests reads ours, with its quirks kept where a script may
 * depend on them: numbers as %f, NaN as the string "nan", true/false as the strings "true"
 * and "false", the root as the row's 6-character text, #wrong as a number (null unchecked).
 * What nccl-tests does not have goes under keys of our own ("ringreduce", "link_pct",
 * "split"), which its readers pass over. */

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20 || ch == 0x7f)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

static void json_num(FILE *f, double v) {
  if (isfinite(v))
    fprintf(f, "%f", v);
  else
    fputs("\"nan\"", f); /* nccl-tests' NaN; JSON has neither NaN nor infinity */
}

static const char *json_bool(int v) {
  return v ? "\"true\"" : "\"false\"";
}

/* nccl-tests' "%Y-%m-%d %H:%M:%S", local time. */
static void json_now(FILE *f) {
  char buf[64];
  time_t now = time(NULL);
  struct tm tm;
  if (!localtime_r(&now, &tm) || strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm) == 0)
    snprintf(buf, sizeof buf, "?");
  json_str(f, buf);
}

/* nccl-tests lists the whole environment; this lists what shapes a run (the launcher's
 * variables, ringreduce's and NCCL's settings, the CPU and GPU placement), so that a
 * result file passed around does not carry a user's unrelated secrets, nor the job token. */
static int env_relevant(const char *kv) {
  static const char *const exact[] = {
      "RANK=",        "LOCAL_RANK=", "WORLD_SIZE=", "LOCAL_WORLD_SIZE=",     "MASTER_ADDR=",
      "MASTER_PORT=", "GROUP_RANK=", "ROLE_RANK=",  "CUDA_VISIBLE_DEVICES=", "OMP_NUM_THREADS="};
  static const char *const prefix[] = {"RR_", "NCCL_", "MALLOC_"};
  if (!strncmp(kv, "RR_JOB_TOKEN=", 13)) return 0;
  const char *eq = strchr(kv, '=');
  if (!eq) return 0;
  for (const char *p = kv; p < eq; p++) /* any other name that says it is a secret */
    if (!strncmp(p, "TOKEN", 5) || !strncmp(p, "SECRET", 6) || !strncmp(p, "PASSW", 5)) return 0;
  for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
    if (!strncmp(kv, exact[i], strlen(exact[i]))) return 1;
  for (size_t i = 0; i < sizeof prefix / sizeof *prefix; i++)
    if (!strncmp(kv, prefix[i], strlen(prefix[i]))) return 1;
  return 0;
}

extern char **environ;

/* The document's start: everything before "config". */
static void json_preamble(perf_report *r) {
  FILE *f = r->json;
  const perf_opts *o = r->o;
  static const char *agg_names[] = {"rank0", "avg", "min", "max"};
  fprintf(f, "{\n  \"version\": 3,\n  \"start_time\": ");
  json_now(f);
  fprintf(f, ",\n  \"args\": [");
  for (int i = 0; i < o->argc; i++) {
    if (i) fputs(", ", f);
    json_str(f, o->argv[i]);
  }
  fprintf(f, "],\n  \"env\": [");
  int n = 0;
  for (char **e = environ; e && *e; e++)
    if (env_relevant(*e)) {
      if (n++) fputs(", ", f);
      json_str(f, *e);
    }
  fprintf(f, "],\n  \"ringreduce\": {\"tool\": ");
  json_str(f, r->tool);
  fprintf(f,
          ", \"version\": \"%d.%d.%d\", \"nranks\": %d, \"datatype\": \"%s\", \"op\": \"%s\", "
          "\"root\": %d, \"average\": \"%s\", \"blocking\": %d, \"unalign\": %d, "
          "\"run_cycles\": %ld, \"link_gbps\": ",
          RR_VERSION_MAJOR, RR_VERSION_MINOR, RR_VERSION_PATCH, r->nranks,
          o->all_dtypes ? "all" : rr_dtype_name(o->dtype),
          !r->coll->reduces ? "none"
          : o->all_ops      ? "all"
                            : rr_op_name(o->op),
          o->root, agg_names[o->agg], o->blocking, o->unalign, o->cycles);
  if (r->link_gbps > 0)
    json_num(f, r->link_gbps);
  else
    fputs("null", f);
  fprintf(f, ", \"link\": ");
  json_str(f, r->link_src);
  /* Our own object: JSON's own true and false. */
  fprintf(f, ", \"percentiles\": %s, \"split\": %s}", o->percentiles ? "true" : "false",
          o->split ? "true" : "false");
  r->json_started = 1;
}

static void json_header(perf_report *r) {
  FILE *f = r->json;
  const perf_opts *o = r->o;
  json_preamble(r);
  fprintf(f,
          ",\n  \"config\": {\"nthreads\": 1, \"ngpus\": 1, \"minimum_bytes\": %zu, "
          "\"maximum_bytes\": %zu, ",
          r->header_min, r->header_max);
  if (o->stepfactor > 1)
    fprintf(f, "\"step_factor\": %zu, ", o->stepfactor);
  else
    fprintf(f, "\"step_bytes\": %zu, ", o->stepbytes);
  fprintf(f,
          "\"warmup_iters\": %d, \"iterations\": %d, \"aggregated_iterations\": 1, "
          "\"validation\": %d, \"graph\": 0, \"blocking_collectives\": %s, "
          "\"per_iter_timing\": %s, \"per_iter_skip\": %d, \"parallel_init\": %s,\n"
          "    \"devices\": [",
          o->warmup, o->iters, o->check, json_bool(o->blocking), json_bool(o->per_iter),
          o->per_iter_skip, json_bool(0));
  for (int i = 0; i < r->nranks; i++) {
    fprintf(f, "%s{\"rank\": %d, \"group\": 0, \"pid\": %d, \"hostname\": ", i ? ", " : "", i,
            (int)r->ranks[i].pid);
    json_str(f, r->ranks[i].host);
    /* The bracketed text of the rank's line, where nccl-tests has the GPU's PCI address. */
    fprintf(f, ", \"device\": %d, \"device_hex\": \"%s\", \"device_info\": \"\"}",
            (int)r->ranks[i].device, r->ranks[i].cuda ? "cuda" : "cpu");
  }
  fprintf(f, "]},\n  \"results\": [");
  r->json_in_results = 1;
}

static double link_pct(const perf_report *r, double busbw) {
  return r->link_gbps > 0 ? busbw * 8.0 / r->link_gbps * 100.0 : NAN; /* GB/s -> Gbit/s */
}

static void json_half(const perf_report *r, FILE *f, int in_place, const perf_half *h) {
  fprintf(f, "\"%s\": {\"%s\": ", in_place ? "in_place" : "out_of_place",
          r->o->cputime ? "cpu_time" : "time");
  json_num(f, h->time_us);
  fprintf(f, ", \"alg_bw\": ");
  json_num(f, h->algbw);
  fprintf(f, ", \"bus_bw\": ");
  json_num(f, h->busbw);
  fprintf(f, ", \"nwrong\": ");
  if (h->wrong < 0)
    fputs("null", f);
  else
    json_num(f, (double)h->wrong);
  if (r->link_gbps > 0) {
    fprintf(f, ", \"link_pct\": ");
    json_num(f, link_pct(r, h->busbw));
  }
  fprintf(f, "}");
  if (!r->o->per_iter || !h->have_iter) return;
  /* -I: the summary, every iteration (its slowest rank), and with several ranks every
   * rank's own times ("per process": one rank per process here). */
  const perf_iter_stats *st = &h->st;
  const int n = r->o->iters;
  fprintf(f, ",\n     \"%s_per_iter\": {\"skipped_iterations\": %d, \"min_us\": ",
          in_place ? "in_place" : "out_of_place", r->o->per_iter_skip);
  json_num(f, st->min);
  fprintf(f, ", \"max_us\": ");
  json_num(f, st->max);
  fprintf(f, ", \"avg_us\": ");
  json_num(f, st->avg);
  fprintf(f, ", \"p50_us\": ");
  json_num(f, st->p50);
  fprintf(f, ", \"p95_us\": ");
  json_num(f, st->p95);
  fprintf(f, ", \"p99_us\": ");
  json_num(f, st->p99);
  fprintf(f, ", \"stdev_us\": ");
  json_num(f, st->stdev);
  fprintf(f, ", \"cv_pct\": ");
  json_num(f, st->cv_pct);
  fprintf(f, ", \"times_us\": [");
  for (int i = 0; i < n; i++) {
    if (i) fputs(", ", f);
    json_num(f, h->times[i]);
  }
  fprintf(f, "]");
  if (r->nranks > 1) {
    fprintf(f, ", \"per_process_max_times_us\": [");
    for (int p = 0; p < r->nranks; p++) {
      fprintf(f, "%s[", p ? ", " : "");
      for (int i = 0; i < n; i++) {
        if (i) fputs(", ", f);
        json_num(f, h->rank_times[(size_t)p * (size_t)n + (size_t)i]);
      }
      fprintf(f, "]");
    }
    fprintf(f, "]");
  }
  fprintf(f, "}");
}

static void json_row(perf_report *r, const perf_row *row) {
  FILE *f = r->json;
  fprintf(f,
          "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", "
          "\"root\": \"%6i\",\n     ",
          r->json_rows++ ? "," : "", row->bytes, row->count, rr_dtype_name(row->dtype), row->op,
          row->root);
  json_half(r, f, 0, &row->half[0]);
  fprintf(f, ",\n     ");
  json_half(r, f, 1, &row->half[1]);
  if (r->o->split) {
    const perf_split *sp = &row->split;
    fprintf(f, ",\n     \"split\": {\"rs_us\": ");
    json_num(f, sp->valid ? sp->rs_us : NAN);
    fprintf(f, ", \"ag_us\": ");
    json_num(f, sp->valid ? sp->ag_us : NAN);
    fprintf(f, ", \"rs_busbw_GBps\": ");
    json_num(f, sp->valid ? sp->rs_busbw : NAN);
    fprintf(f, ", \"ag_busbw_GBps\": ");
    json_num(f, sp->valid ? sp->ag_busbw : NAN);
    fprintf(f, ", \"nwrong\": ");
    if (sp->valid && sp->wrong >= 0)
      json_num(f, (double)sp->wrong);
    else
      fputs("null", f);
    fprintf(f, "}");
  }
  fprintf(f, ", \"actual_iterations\": %d, \"experiment_name\": \"\"}", r->o->iters);
  fflush(f);
}

/* The end of the document: "errors" (empty, or why the run stopped) and "end_time". */
static int json_close(perf_report *r, const char *error) {
  FILE *f = r->json;
  fprintf(f, ",\n  \"errors\": [");
  if (error) json_str(f, error);
  fprintf(f, "],\n  \"end_time\": ");
  json_now(f);
  fprintf(f, "\n}\n");
  r->json = NULL;
  if (ferror(f) | (fclose(f) != 0)) {
    perror(r->json_path);
    return 1;
  }
  return 0;
}

void perf_report_abort(perf_report *r, const char *error) {
  if (!r->json) return;
  if (!r->json_started) json_preamble(r);
  if (r->json_in_results) fprintf(r->json, "\n  ]");
  r->json_in_results = 0;
  (void)json_close(r, error); /* the run has failed already: its exit status says so */
}

/* ---------------------------------------------------------------------------------------
 * The table. */

/* nccl-tests 2.19's numbers: the most decimals (2, 1, 0) that fit the column, then an
 * exponent. */
static void fmt_num(char *buf, int width, double v) {
  const size_t cap = (size_t)width + 1;
  if (snprintf(buf, cap, "%*.2f", width, v) <= width) return;
  if (snprintf(buf, cap, "%*.1f", width, v) <= width) return;
  if (snprintf(buf, cap, "%*.0f", width, v) <= width) return;
  snprintf(buf, cap, width >= 7 ? "%*.1e" : "%*.0e", width, v);
}

/* nccl-tests' timestamp column (-S): 2 spaces and the local date and time. */
static void print_timestamp(void) {
  char buf[64];
  time_t now = time(NULL);
  struct tm tm;
  if (!localtime_r(&now, &tm) || strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm) == 0)
    snprintf(buf, sizeof buf, "?");
  printf("%21s", buf);
}

void perf_report_header(perf_report *r) {
  const perf_opts *o = r->o;
  printf("# nccl-tests style: %s (ringreduce %d.%d.%d)\n", r->tool, RR_VERSION_MAJOR,
         RR_VERSION_MINOR, RR_VERSION_PATCH);
  printf("# Collective test starting: %s\n", r->tool);
  printf(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "agg iters: 1 validation: %d graph: 0 unalign: %d\n",
      r->header_min, r->header_max, o->stepfactor > 1 ? o->stepfactor : o->stepbytes,
      o->stepfactor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->check, o->unalign);
  if (o->blocking == 1)
    printf("# Blocking Enabled: wait and barrier after each inner iteration (-m) \n");
  if (o->blocking == 2)
    printf("# Blocking Enabled: wait after each inner iteration (-m), no barrier \n");
  if (o->blocking == 3)
    printf(
        "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes "
        "barrier \n");
  if (o->per_iter) {
    /* nccl-tests times iterations with CUDA events; here each call by the host's clock. */
    printf("# Per-Iteration Report: host clock timing; i_* uses max over process rows");
    if (o->per_iter_skip) printf("; summary skips first %d iterations", o->per_iter_skip);
    printf(" \n");
  }
  printf("#\n# Using devices\n");
  for (int i = 0; i < r->nranks; i++)
    printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s]\n", i, 0, (int)r->ranks[i].pid,
           r->ranks[i].host, (int)r->ranks[i].device, r->ranks[i].cuda ? "cuda" : "cpu");
  if (r->reduced_max)
    printf("#\n# Reducing maxBytes to %zu due to memory limitation\n", r->reduced_max);
  if (r->coll->describe) r->coll->describe(r->ctx);
  printf("#\n");

  /* The three column-header lines (nccl-tests 2.19's, -I's variant with the per-iteration
   * columns after each half), then each extra group's part of them. */
  const char *tlabel = o->cputime ? "cputime" : "time";
  const int tspad = o->timestamps ? 19 : 0;
  const char *tsname = o->timestamps ? "timestamp" : "",
             *tsunit = o->timestamps ? "%Y-%m-%d %H:%M:%S" : "";
  char meta[1024], names[1024], units[1024];
  int m, n, u;
  if (o->per_iter) {
    m = snprintf(meta, sizeof meta,
                 "# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)      "
                 "                          in-place (+ per-iteration)",
                 "", "", "", "", "");
    n = snprintf(names, sizeof names,
                 "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  "
                 "%6s  %6s  %7s  %7s  %7s  %7s %*s",
                 "size", "count", "type", "redop", "root", tlabel, "algbw", "busbw", "#wrong",
                 "i_min", "i_max", "i_p99", "i_cv%", tlabel, "algbw", "busbw", "#wrong", "i_min",
                 "i_max", "i_p99", "i_cv%", tspad, tsname);
    u = snprintf(units, sizeof units,
                 "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  "
                 "%6s  %6s  %7s  %7s  %7s  %7s %*s",
                 "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)",
                 "(us)", "(%)", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)",
                 tspad, tsunit);
  } else {
    m = snprintf(meta, sizeof meta,
                 "# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
                 "in-place          ",
                 "", "", "", "", "");
    n = snprintf(names, sizeof names,
                 "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s", "size",
                 "count", "type", "redop", "root", tlabel, "algbw", "busbw", "#wrong", tlabel,
                 "algbw", "busbw", "#wrong", tspad, tsname);
    u = snprintf(units, sizeof units,
                 "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s", "(B)",
                 "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                 "(GB/s)", "", tspad, tsunit);
  }
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
    (void)snprintf(units + u, sizeof units - (size_t)u, "  %7s  %7s  %5s", "(us)", "(us)", "");
  }
  printf("%s\n%s\n%s\n", meta, names, units);
  if (r->json) json_header(r);
}

/* One half's standard columns: time, algbw, busbw, #wrong. */
static void print_half(const perf_half *h) {
  char t[16], a[16], b[16];
  fmt_num(t, 7, h->time_us);
  fmt_num(a, 6, h->algbw);
  fmt_num(b, 6, h->busbw);
  if (h->wrong >= 0)
    printf("  %7s  %6s  %6s  %6g", t, a, b, (double)h->wrong);
  else
    printf("  %7s  %6s  %6s    N/A", t, a, b);
}

/* -I's four columns after a half. */
static void print_iter(const perf_half *h) {
  char mn[16], mx[16], p99[16], cv[16];
  fmt_num(mn, 7, h->st.min);
  fmt_num(mx, 7, h->st.max);
  fmt_num(p99, 7, h->st.p99);
  fmt_num(cv, 7, h->st.cv_pct);
  printf("  %7s  %7s  %7s  %7s", mn, mx, p99, cv);
}

void perf_report_row(perf_report *r, const perf_row *row) {
  const perf_opts *o = r->o;
  printf("%12zu  %12zu  %8s  %6s  %6i", row->bytes, row->count, rr_dtype_name(row->dtype), row->op,
         row->root);
  for (int i = 0; i < 2; i++) {
    const perf_half *h = &row->half[i];
    print_half(h);
    if (o->per_iter) print_iter(h);
    /* Footer totals, as nccl-tests: busbw averaged over every half of every row. */
    r->bw_sum += h->busbw;
    r->bw_count++;
    if (h->busbw > r->best_busbw) r->best_busbw = h->busbw;
    if (h->wrong > 0) r->wrong_total += h->wrong;
  }
  if (o->timestamps) print_timestamp();
  char t[32], w[32];
  if (r->link_column)
    for (int i = 0; i < 2; i++) {
      if (r->link_gbps > 0)
        printf("  %6.1f", link_pct(r, row->half[i].busbw));
      else
        printf("  %6s", "N/A");
    }
  if (o->percentiles)
    for (int i = 0; i < 2; i++) {
      fmt_num(t, 7, row->half[i].st.p50);
      fmt_num(w, 7, row->half[i].st.p99);
      printf("  %7s  %7s", t, w);
    }
  if (o->split) {
    const perf_split *sp = &row->split;
    char a[32];
    if (sp->valid) {
      fmt_num(t, 7, sp->rs_us);
      fmt_num(a, 7, sp->ag_us);
    } else {
      snprintf(t, sizeof t, "N/A");
      snprintf(a, sizeof a, "N/A");
    }
    if (sp->valid && sp->wrong >= 0)
      snprintf(w, sizeof w, "%" PRId64, sp->wrong);
    else
      snprintf(w, sizeof w, "N/A");
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
  printf("#\n# Collective test concluded: %s\n#\n", r->tool);

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

  int failed = 0;
  if (r->json) {
    FILE *f = r->json;
    fprintf(f, "\n  ],\n  \"out_of_bounds\": {\"count\": %" PRId64 ", \"okay\": %s},\n",
            r->wrong_total, json_bool(r->wrong_total == 0));
    fprintf(f, "  \"average_bus_bandwidth\": {\"bandwidth\": ");
    json_num(f, avg);
    fprintf(f, ", \"okay\": %s}", min_bw == -1 ? "\"unchecked\"" : json_bool(!bw_failed));
    r->json_in_results = 0;
    failed = json_close(r, NULL);
  }
  fflush(stdout);
  return failed || r->wrong_total > 0 || bw_failed;
}

/* Where rank, world size and the rendezvous come from, as torch.distributed reads them:
 *   env://                               RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
 *   tcp://host:port?rank=R&world_size=N
 *   file:///path?rank=R&world_size=N
 * Under srun or mpirun, with RANK/WORLD_SIZE unset, Slurm's or Open MPI's variables stand in;
 * under srun MASTER_ADDR and MASTER_PORT may be unset too (the step's first node, and a port
 * from the job and step ids).
 * Every missing or malformed value is an error that names it. */
#include "rendezvous/init_method.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

static int rr__parse_int(const char *what, const char *s, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!*s || *end || errno || v < lo || v > hi)
    return rr__set_error(RR_EENV, "%s='%s' is not an integer in %ld..%ld", what, s, lo, hi);
  *out = (int)v;
  return RR_OK;
}

/* Read an integer variable; absent -> RR_INPROGRESS-free "not set" (returns 1). */
static int rr__env_int(const char *name, long lo, long hi, int *out, int *found) {
  const char *v = getenv(name);
  *found = v != NULL && *v != '\0';
  if (!*found) return RR_OK;
  return rr__parse_int(name, v, lo, hi, out);
}

/* RANK / WORLD_SIZE, else SLURM_PROCID / SLURM_NTASKS, else OMPI_COMM_WORLD_RANK / _SIZE. */
static int rr__env_rank_world(rr__init_info *in) {
  static const char *const sets[][3] = {
      {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"}};
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
    int fr, fw;
    RR__CHECK(rr__env_int(sets[i][0], 0, INT_MAX - 1, &in->rank, &fr));
    RR__CHECK(rr__env_int(sets[i][1], 1, INT_MAX, &in->world_size, &fw));
    if (fr && fw) {
      in->source = sets[i][0];
      return RR_OK;
    }
    if (fr != fw)
      return rr__set_error(RR_EENV, "environment variable %s expected, but not set (%s is set)",
                           fr ? sets[i][1] : sets[i][0], fr ? sets[i][0] : sets[i][1]);
  }
  return rr__set_error(RR_EENV,
                       "environment variable RANK expected, but not set (nor SLURM_PROCID or "
                       "OMPI_COMM_WORLD_RANK); launch with rrun, srun or mpirun, or pass "
                       "rank and world_size");
}

int rr__slurm_first_host(const char *list, char *out, size_t n) {
  /* Slurm's host lists: entries split by commas outside brackets, each a name with bracketed
   * ranges in it ("node[01-04,07]", "rack[1-2]-gpu[3-4]"). The first host of the first entry:
   * every bracket replaced by its first number, as written (zero padding kept). */
  size_t o = 0;
  const char *p = list ? list : "";
  while (*p && *p != ',') {
    if (*p == '[') {
      p++;
      if (!(*p >= '0' && *p <= '9')) return -1;
      while (*p >= '0' && *p <= '9') {
        if (o + 1 >= n) return -1;
        out[o++] = *p++;
      }
      const char *close = strchr(p, ']');
      if (!close) return -1;
      p = close + 1;
    } else {
      if (*p == ']' || o + 1 >= n) return -1;
      out[o++] = *p++;
    }
  }
  if (o == 0) return -1;
  out[o] = '\0';
  return 0;
}

int rr__slurm_tasks_on_node(const char *per_node, int node) {
  /* SLURM_STEP_TASKS_PER_NODE: "2(x3),1" is 2 tasks on each of 3 nodes, then 1 on the next. */
  const char *p = per_node ? per_node : "";
  int at = 0;
  while (*p) {
    char *end;
    long tasks = strtol(p, &end, 10), times = 1;
    if (end == p || tasks < 1 || tasks > INT_MAX) return -1;
    p = end;
    if (*p == '(') {
      if (p[1] != 'x') return -1;
      times = strtol(p + 2, &end, 10);
      if (end == p + 2 || *end != ')' || times < 1 || times > INT_MAX) return -1;
      p = end + 1;
    }
    if (node < at + times) return (int)tasks;
    at += (int)times;
    if (*p == ',')
      p++;
    else if (*p)
      return -1;
  }
  return -1;
}

static void rr__env_local(rr__init_info *in) {
  static const char *const lr[] = {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"};
  static const char *const lw[] = {"LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE",
                                   "OMPI_COMM_WORLD_LOCAL_SIZE"};
  in->local_rank = -1;
  in->local_world_size = -1;
  for (size_t i = 0; i < 3 && in->local_rank < 0; i++) {
    int v = 0, f = 0;
    if (rr__env_int(lr[i], 0, INT_MAX - 1, &v, &f) == RR_OK && f) in->local_rank = v;
  }
  for (size_t i = 0; i < 3 && in->local_world_size < 0; i++) {
    int v = 0, f = 0;
    /* Under Slurm this node's own count comes first: SLURM_NTASKS_PER_NODE is set only with
     * --ntasks-per-node and is wrong for an uneven layout. */
    if (i == 1 && getenv("SLURM_STEP_TASKS_PER_NODE") &&
        rr__env_int("SLURM_NODEID", 0, INT_MAX - 1, &v, &f) == RR_OK && f) {
      int t = rr__slurm_tasks_on_node(getenv("SLURM_STEP_TASKS_PER_NODE"), v);
      if (t > 0) {
        in->local_world_size = t;
        break;
      }
    }
    if (rr__env_int(lw[i], 1, INT_MAX, &v, &f) == RR_OK && f) in->local_world_size = v;
  }
  rr__clear_error();
}

/* Under srun without MASTER_ADDR / MASTER_PORT (the ranks came from SLURM_PROCID): the
 * master is the step's first node, where task 0 runs in Slurm's block and cyclic
 * distributions, and the port a function of the job and step ids, the same for every task,
 * below the kernel's ephemeral range (32768 on); two steps on one node at once get
 * different ports unless their ids collide modulo 12768 (set MASTER_PORT then). */
static int rr__slurm_master(rr__init_info *in, const char **addr, const char **port, char *abuf,
                            size_t an, char *pbuf, size_t pn) {
  if (!*addr || !**addr) {
    const char *list = getenv("SLURM_STEP_NODELIST");
    if (!list || !*list) list = getenv("SLURM_JOB_NODELIST");
    if (list && *list) {
      if (rr__slurm_first_host(list, abuf, an) != 0)
        return rr__set_error(RR_EENV,
                             "MASTER_ADDR is not set and Slurm's node list '%s' could "
                             "not be read",
                             list);
      *addr = abuf;
    }
  }
  if (!*port || !**port) {
    int job = 0, step = 0, fj = 0, fs = 0;
    RR__CHECK(rr__env_int("SLURM_JOB_ID", 0, INT_MAX, &job, &fj));
    RR__CHECK(rr__env_int("SLURM_STEP_ID", 0, INT_MAX, &step, &fs));
    if (fj) {
      snprintf(pbuf, pn, "%d", 20000 + (int)(((unsigned)job * 131u + (unsigned)step) % 12768u));
      *port = pbuf;
    }
  }
  (void)in;
  return RR_OK;
}

/* "rank=R&world_size=N" -> fields (an unknown or repeated key is an error: a typo, or two
 * values of which one would silently win, must not pass). */
static int rr__parse_query(const char *q, rr__init_info *in, int *have_rank, int *have_world) {
  char key[32], val[32];
  while (q && *q) {
    size_t n = strcspn(q, "&");
    const char *eq = memchr(q, '=', n);
    if (!eq || (size_t)(eq - q) >= sizeof key || n - (size_t)(eq - q) - 1 >= sizeof val)
      return rr__set_error(RR_EINVAL, "malformed init_method query '%.*s'", (int)n, q);
    memcpy(key, q, (size_t)(eq - q));
    key[eq - q] = '\0';
    memcpy(val, eq + 1, n - (size_t)(eq - q) - 1);
    val[n - (size_t)(eq - q) - 1] = '\0';
    if ((!strcmp(key, "rank") && *have_rank) || (!strcmp(key, "world_size") && *have_world))
      return rr__set_error(RR_EINVAL, "init_method parameter '%s' given twice", key);
    if (!strcmp(key, "rank")) {
      RR__CHECK(rr__parse_int("rank", val, 0, INT_MAX - 1, &in->rank));
      *have_rank = 1;
    } else if (!strcmp(key, "world_size")) {
      RR__CHECK(rr__parse_int("world_size", val, 1, INT_MAX, &in->world_size));
      *have_world = 1;
    } else {
      return rr__set_error(RR_EINVAL, "unknown init_method parameter '%s' (rank, world_size)", key);
    }
    q += n;
    if (*q == '&') q++;
  }
  return RR_OK;
}

static int rr__parse_hostport(const char *s, size_t n, rr__init_info *in) {
  char buf[sizeof in->host + 8];
  if (n >= sizeof buf) return rr__set_error(RR_EINVAL, "host name in init_method too long");
  memcpy(buf, s, n);
  buf[n] = '\0';
  char *colon = strrchr(buf, ':');
  if (!colon || colon == buf || (buf[0] == '[' && colon < strchr(buf, ']')))
    return rr__set_error(RR_EINVAL, "init_method 'tcp://%s' needs host:port", buf);
  *colon = '\0';
  RR__CHECK(rr__parse_int("port of tcp:// init_method", colon + 1, 1, 65535, &in->port));
  size_t hl = strlen(buf);
  if (hl >= sizeof in->host) return rr__set_error(RR_EINVAL, "host name in init_method too long");
  memcpy(in->host, buf, hl + 1);
  return RR_OK;
}

int rr__init_parse(const rr_pg_options *opt, int on_store, rr__init_info *in) {
  memset(in, 0, sizeof *in);
  const char *m = opt && opt->init_method ? opt->init_method : "env://";
  int have_rank = 0, have_world = 0;
  const char *q = strchr(m, '?');
  size_t body_len = q ? (size_t)(q - m) : strlen(m);

  if (on_store) {
    /* The caller's store carries the rendezvous (rr_init_process_group_on_store). */
    in->kind = RR__INIT_STORE;
    if (!opt || opt->world_size <= 0)
      return rr__set_error(RR_EINVAL,
                           "a group on the caller's store "
                           "(rr_init_process_group_on_store) needs rank and world_size in "
                           "rr_pg_options");
    in->rank = opt->rank;
    in->world_size = opt->world_size;
    in->source = "options";
    /* MASTER_ADDR, when a launcher set it, still says which interface reaches the others. */
    const char *addr = getenv("MASTER_ADDR");
    if (addr && *addr && strlen(addr) < sizeof in->host)
      snprintf(in->host, sizeof in->host, "%s", addr);
  } else if (!strncmp(m, "env://", 6)) {
    in->kind = RR__INIT_ENV;
    /* As torch: env:// names nothing after the scheme; ?rank= and ?world_size= in the URL
     * win over RANK and WORLD_SIZE, each on its own. */
    if (body_len != 6)
      return rr__set_error(RR_EINVAL,
                           "init_method '%s': env:// takes no host or path, only "
                           "?rank=R&world_size=N (the rest comes from MASTER_ADDR, MASTER_PORT)",
                           m);
    RR__CHECK(rr__parse_query(q ? q + 1 : NULL, in, &have_rank, &have_world));
    if (opt && opt->world_size > 0) {
      in->rank = opt->rank;
      in->world_size = opt->world_size;
      in->source = "options";
    } else if (have_rank && have_world) {
      in->source = "init_method";
    } else if (have_rank || have_world) {
      int found = 0;
      const char *name = have_rank ? "WORLD_SIZE" : "RANK";
      RR__CHECK(have_rank ? rr__env_int(name, 1, INT_MAX, &in->world_size, &found)
                          : rr__env_int(name, 0, INT_MAX - 1, &in->rank, &found));
      if (!found)
        return rr__set_error(RR_EENV,
                             "environment variable %s expected, but not set (the "
                             "init_method gives only %s)",
                             name, have_rank ? "rank" : "world_size");
      in->source = "init_method and environment";
    } else {
      RR__CHECK(rr__env_rank_world(in));
    }
    const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    char abuf[256], pbuf[16];
    if (in->source && !strcmp(in->source, "SLURM_PROCID"))
      RR__CHECK(rr__slurm_master(in, &addr, &port, abuf, sizeof abuf, pbuf, sizeof pbuf));
    if (!addr || !*addr)
      return rr__set_error(RR_EENV, "environment variable MASTER_ADDR expected, but not set");
    if (!port || !*port)
      return rr__set_error(RR_EENV, "environment variable MASTER_PORT expected, but not set");
    if (strlen(addr) >= sizeof in->host) return rr__set_error(RR_EENV, "MASTER_ADDR is too long");
    snprintf(in->host, sizeof in->host, "%s", addr);
    RR__CHECK(rr__parse_int("MASTER_PORT", port, 1, 65535, &in->port));
  } else if (!strncmp(m, "tcp://", 6)) {
    in->kind = RR__INIT_TCP;
    RR__CHECK(rr__parse_hostport(m + 6, body_len - 6, in));
    RR__CHECK(rr__parse_query(q ? q + 1 : NULL, in, &have_rank, &have_world));
  } else if (!strncmp(m, "file://", 7)) {
    in->kind = RR__INIT_FILE;
    if (body_len - 7 == 0 || body_len - 7 >= sizeof in->path)
      return rr__set_error(RR_EINVAL, "init_method 'file://' needs a path");
    memcpy(in->path, m + 7, body_len - 7);
    in->path[body_len - 7] = '\0';
    RR__CHECK(rr__parse_query(q ? q + 1 : NULL, in, &have_rank, &have_world));
  } else {
    return rr__set_error(RR_EINVAL,
                         "unknown init_method '%s' (env://, tcp://host:port, file:///path)", m);
  }

  if (in->kind != RR__INIT_ENV && in->kind != RR__INIT_STORE) {
    if (opt && opt->world_size > 0) {
      in->rank = opt->rank;
      in->world_size = opt->world_size;
      have_rank = have_world = 1;
    }
    if (!have_rank || !have_world)
      return rr__set_error(RR_EINVAL,
                           "init_method '%s' needs %s (in the URL as ?rank=R&world_size=N, "
                           "or in rr_pg_options)",
                           m, !have_rank ? "rank" : "world_size");
    in->source = "init_method";
  }
  if (in->rank < 0 || in->rank >= in->world_size)
    return rr__set_error(RR_EINVAL, "rank %d is outside 0..%d (world size %d, from %s)", in->rank,
                         in->world_size - 1, in->world_size, in->source);
  rr__env_local(in);
  return RR_OK;
}

#include "transport/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "common/status.h"
#include "common/util.h"

int rr__addr_resolve(const char *host, int port, rr__addr *out) {
  struct addrinfo hints = {0}, *res = NULL;
  char portstr[16];
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  snprintf(portstr, sizeof portstr, "%d", port);
  /* Strip [] around IPv6 literals. */
  char buf[256];
  if (strlen(host ? host : "") >= sizeof buf)
    return rr__set_error(RR_EADDR, "host name '%.40s...' is longer than %zu characters", host,
                         sizeof buf - 1);
  snprintf(buf, sizeof buf, "%s", host ? host : "");
  char *h = buf;
  size_t hl = strlen(h);
  if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
    h[hl - 1] = '\0';
    h++;
  }
  if (port < 0 || port > 65535)
    return rr__set_error(RR_EADDR, "port %d is out of range 0..65535", port);
  int rc = getaddrinfo(h, portstr, &hints, &res);
  if (rc != 0 || !res)
    return rr__set_error(RR_EADDR, "cannot resolve host '%s': %s", h,
                         rc ? gai_strerror(rc) : "no address");
  /* Prefer IPv4 when a name has both, so that every rank picks the same family. */
  struct addrinfo *pick = res;
  for (struct addrinfo *a = res; a; a = a->ai_next)
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  memset(out, 0, sizeof *out);
  memcpy(&out->ss, pick->ai_addr, pick->ai_addrlen);
  out->len = pick->ai_addrlen;
  freeaddrinfo(res);
  return RR_OK;
}

const char *rr__addr_str(const rr__addr *a, char *buf, size_t n) {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (a->ss.ss_family == AF_INET) {
    const struct sockaddr_in *s = (const struct sockaddr_in *)&a->ss;
    inet_ntop(AF_INET, &s->sin_addr, ip, sizeof ip);
    snprintf(buf, n, "%s:%d", ip, ntohs(s->sin_port));
  } else if (a->ss.ss_family == AF_INET6) {
    const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)&a->ss;
    inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof ip);
    snprintf(buf, n, "[%s]:%d", ip, ntohs(s->sin6_port));
  } else {
    snprintf(buf, n, "<no address>");
  }
  return buf;
}

int rr__addr_parse(const char *s, rr__addr *out) {
  char host[RR__ADDRSTRLEN];
  const char *colon = strrchr(s, ':');
  if (!colon || (size_t)(colon - s) >= sizeof host)
    return rr__set_error(RR_EPROTO, "malformed address '%.64s'", s);
  memcpy(host, s, (size_t)(colon - s));
  host[colon - s] = '\0';
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end || port < 0 || port > 65535)
    return rr__set_error(RR_EPROTO, "malformed port in address '%.64s'", s);
  return rr__addr_resolve(host, (int)port, out);
}

int rr__addr_port(const rr__addr *a) {
  if (a->ss.ss_family == AF_INET) return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
  if (a->ss.ss_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
  return -1;
}

void rr__addr_set_port(rr__addr *a, int port) {
  if (a->ss.ss_family == AF_INET) ((struct sockaddr_in *)&a->ss)->sin_port = htons((uint16_t)port);
  if (a->ss.ss_family == AF_INET6)
    ((struct sockaddr_in6 *)&a->ss)->sin6_port = htons((uint16_t)port);
}

void rr__addr_any(int family, int port, rr__addr *out) {
  memset(out, 0, sizeof *out);
  if (family == AF_INET6) {
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&out->ss;
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    out->len = sizeof *a6;
  } else {
    struct sockaddr_in *a4 = (struct sockaddr_in *)&out->ss;
    a4->sin_family = AF_INET;
    a4->sin_addr.s_addr = htonl(INADDR_ANY);
    out->len = sizeof *a4;
  }
  rr__addr_set_port(out, port);
}

int rr__addr_is_loopback(const rr__addr *a) {
  if (a->ss.ss_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr) >> 24) == 127;
  if (a->ss.ss_family == AF_INET6)
    return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)&a->ss)->sin6_addr);
  return 0;
}

int rr__if_match(const char *spec, const char *ifname) {
  if (!spec || !*spec) return 1;
  int exclude = 0, exact = 0;
  if (*spec == '^') exclude = 1, spec++;
  if (*spec == '=') exact = 1, spec++;
  int hit = 0;
  while (*spec && !hit) {
    size_t n = strcspn(spec, ",");
    if (n > 0) {
      if (exact)
        hit = strlen(ifname) == n && strncmp(ifname, spec, n) == 0;
      else
        hit = strncmp(ifname, spec, n) == 0;
    }
    spec += n;
    if (*spec == ',') spec++;
  }
  return exclude ? !hit : hit;
}

/* Does `a` lie in the subnet of interface address `ifa` / `mask`? */
static int rr__same_subnet(const struct sockaddr *ifa, const struct sockaddr *mask,
                           const rr__addr *a) {
  if (!ifa || !mask || ifa->sa_family != a->ss.ss_family) return 0;
  if (ifa->sa_family == AF_INET) {
    uint32_t x = ((const struct sockaddr_in *)ifa)->sin_addr.s_addr;
    uint32_t m = ((const struct sockaddr_in *)mask)->sin_addr.s_addr;
    uint32_t y = ((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr;
    return (x & m) == (y & m);
  }
  const uint8_t *x = ((const struct sockaddr_in6 *)ifa)->sin6_addr.s6_addr;
  const uint8_t *m = ((const struct sockaddr_in6 *)mask)->sin6_addr.s6_addr;
  const uint8_t *y = ((const struct sockaddr_in6 *)&a->ss)->sin6_addr.s6_addr;
  for (int i = 0; i < 16; i++)
    if ((x[i] & m[i]) != (y[i] & m[i])) return 0;
  return 1;
}

static void rr__take(const struct ifaddrs *i, rr__addr *out, char *ifname, size_t n) {
  memset(out, 0, sizeof *out);
  out->len =
      i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
  memcpy(&out->ss, i->ifa_addr, out->len);
  rr__addr_set_port(out, 0);
  if (ifname && n) snprintf(ifname, n, "%s", i->ifa_name);
}

int rr__if_select(const char *spec, const rr__addr *hint, rr__addr *out, char *ifname,
                  size_t ifname_len) {
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0) return rr__set_error(RR_ESYS, "getifaddrs: %s", strerror(errno));
  const struct ifaddrs *best = NULL;
  int best_rank = 1 << 30;
  /* Rank candidates: lower is better. Families: IPv4 before IPv6 (link-local IPv6 is
   * skipped: it needs a scope id the peers cannot know). */
  for (const struct ifaddrs *i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (fam == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr))
      continue;
    int lo = (i->ifa_flags & IFF_LOOPBACK) != 0;
    int rank;
    if (spec && *spec) {
      if (!rr__if_match(spec, i->ifa_name)) continue;
      rank = 0;
    } else if (hint && rr__same_subnet(i->ifa_addr, i->ifa_netmask, hint)) {
      rank = 0;
    } else if (hint && rr__addr_is_loopback(hint)) {
      rank = lo ? 1 : 4; /* a loopback master means a one-host job: stay on loopback */
    } else if (!lo && strncmp(i->ifa_name, "docker", 6) != 0) {
      rank = 2;
    } else if (lo) {
      rank = 3;
    } else {
      rank = 5;
    }
    rank = rank * 2 + (fam == AF_INET6);
    if (rank < best_rank) best_rank = rank, best = i;
  }
  int rc = RR_OK;
  if (best)
    rr__take(best, out, ifname, ifname_len);
  else
    rc = rr__set_error(RR_EADDR, "no usable network interface%s%s%s",
                       spec && *spec ? " matches RR_SOCKET_IFNAME='" : "",
                       spec && *spec ? spec : "", spec && *spec ? "'" : "");
  freeifaddrs(list);
  return rc;
}

int rr__sock_nonblock(int fd, int on) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return rr__set_error(RR_ESYS, "fcntl(F_GETFL): %s", strerror(errno));
  fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
  if (fcntl(fd, F_SETFL, fl) < 0)
    return rr__set_error(RR_ESYS, "fcntl(F_SETFL): %s", strerror(errno));
  return RR_OK;
}

int rr__sock_tune(int fd, int64_t bufsize) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    return rr__set_error(RR_ESYS, "setsockopt(TCP_NODELAY): %s", strerror(errno));
  if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) != 0)
    return rr__set_error(RR_ESYS, "setsockopt(SO_KEEPALIVE): %s", strerror(errno));
  if (bufsize > 0) {
    int b = bufsize > (1 << 30) ? (1 << 30) : (int)bufsize;
    /* The kernel caps these at net.core.[rw]mem_max; a smaller result is not an error. */
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b) != 0)
      return rr__set_error(RR_ESYS, "setsockopt(SO_SNDBUF/SO_RCVBUF): %s", strerror(errno));
  }
  return RR_OK;
}

int rr__sock_listen(const rr__addr *addr, int backlog, int reuse, int *fd_out, rr__addr *bound) {
  char as[RR__ADDRSTRLEN];
  int fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return rr__set_error(RR_ESYS, "socket: %s", strerror(errno));
  int one = 1;
  if (reuse && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    close(fd);
    return rr__set_error(RR_ESYS, "setsockopt(SO_REUSEADDR): %s", strerror(errno));
  }
  if (bind(fd, (const struct sockaddr *)&addr->ss, addr->len) != 0) {
    int e = errno;
    close(fd);
    return rr__set_error(e == EADDRINUSE || e == EADDRNOTAVAIL ? RR_EADDR : RR_ESYS,
                         "cannot listen on %s: %s%s", rr__addr_str(addr, as, sizeof as),
                         strerror(e),
                         e == EADDRINUSE ? " (another process holds this port; pick another)" : "");
  }
  if (listen(fd, backlog) != 0) {
    int e = errno;
    close(fd);
    return rr__set_error(RR_ESYS, "listen on %s: %s", rr__addr_str(addr, as, sizeof as),
                         strerror(e));
  }
  if (bound) {
    memset(bound, 0, sizeof *bound);
    bound->len = sizeof bound->ss;
    if (getsockname(fd, (struct sockaddr *)&bound->ss, &bound->len) != 0) {
      int e = errno;
      close(fd);
      return rr__set_error(RR_ESYS, "getsockname: %s", strerror(e));
    }
  }
  *fd_out = fd;
  return RR_OK;
}

int rr__sock_wait(int fd, short events, int64_t deadline_ms) {
  for (;;) {
    struct pollfd p = {.fd = fd, .events = events};
    int64_t left = rr__ms_left(deadline_ms);
    int rc = poll(&p, 1, (int)RR__MIN(left, 1 << 30));
    if (rc > 0) return RR_OK;
    if (rc == 0) return rr__set_error(RR_ETIMEDOUT, "timed out");
    if (errno != EINTR) return rr__set_error(RR_ESYS, "poll: %s", strerror(errno));
  }
}

int rr__sock_connect(const rr__addr *to, int64_t deadline_ms, int *fd_out) {
  char as[RR__ADDRSTRLEN];
  int last_err = 0;
  int64_t start = rr__now_ms();
  int backoff_ms = 10;
  for (;;) {
    int fd = socket(to->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return rr__set_error(RR_ESYS, "socket: %s", strerror(errno));
    int rc = connect(fd, (const struct sockaddr *)&to->ss, to->len);
    if (rc != 0 && errno == EINPROGRESS) {
      rc = rr__sock_wait(fd, POLLOUT, deadline_ms);
      if (rc == RR_OK) {
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) err = errno;
        errno = err;
        rc = err ? -1 : 0;
      } else if (rc == RR_ETIMEDOUT) {
        errno = ETIMEDOUT;
        rc = -1;
      } else { /* poll itself failed: not worth retrying, keep its error */
        close(fd);
        return rr__prefix_error(rc, "connecting to %s", rr__addr_str(to, as, sizeof as));
      }
    }
    if (rc == 0) {
      int st = rr__sock_nonblock(fd, 0);
      if (st != RR_OK) {
        close(fd);
        return st;
      }
      *fd_out = fd;
      return RR_OK;
    }
    last_err = errno;
    close(fd);
    int retryable = last_err == ECONNREFUSED || last_err == ECONNRESET ||
                    last_err == EHOSTUNREACH || last_err == ENETUNREACH || last_err == ETIMEDOUT ||
                    last_err == EAGAIN || last_err == EINTR;
    if (!retryable)
      return rr__set_error(RR_EADDR, "cannot connect to %s: %s", rr__addr_str(to, as, sizeof as),
                           strerror(last_err));
    if (rr__ms_left(deadline_ms) == 0) break;
    usleep((useconds_t)RR__MIN(backoff_ms, rr__ms_left(deadline_ms) + 1) * 1000);
    backoff_ms = RR__MIN(backoff_ms * 2, 500);
  }
  return rr__set_error(RR_ETIMEDOUT, "cannot connect to %s: %s (kept retrying for %.1f s)",
                       rr__addr_str(to, as, sizeof as), strerror(last_err),
                       (double)(rr__now_ms() - start) / 1000.0);
}

int rr__sock_send_all(int fd, const void *buf, size_t n, int64_t deadline_ms) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
      continue;
    }
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      int rc = rr__sock_wait(fd, POLLOUT, deadline_ms);
      if (rc != RR_OK) return rc;
      continue;
    }
    if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
      return rr__set_error(RR_EPEER, "connection closed by the peer (%s)", strerror(errno));
    return rr__set_error(RR_ESYS, "send: %s", strerror(errno));
  }
  return RR_OK;
}

int rr__sock_recv_all(int fd, void *buf, size_t n, int64_t deadline_ms) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= (size_t)r;
      continue;
    }
    if (r == 0) return rr__set_error(RR_EPEER, "connection closed by the peer");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      int rc = rr__sock_wait(fd, POLLIN, deadline_ms);
      if (rc != RR_OK) return rc;
      continue;
    }
    if (errno == ECONNRESET) return rr__set_error(RR_EPEER, "connection reset by the peer");
    return rr__set_error(RR_ESYS, "recv: %s", strerror(errno));
  }
  return RR_OK;
}

/* One pass over /proc/self/fd: the descriptors of TCP sockets bound to `port`, up to max of
 * them. Descriptors are closed after the listing, not during it: the directory changes as
 * they close. */
static int rr__sockets_on_port(int dfd, int port, int *fds, int max) {
  char buf[4096];
  int n = 0;
  if (lseek(dfd, 0, SEEK_SET) != 0) return -1;
  for (;;) {
    long got = syscall(SYS_getdents64, dfd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return got < 0 ? -1 : n;
    for (long off = 0; off < got;) {
      /* struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name */
      unsigned short reclen;
      memcpy(&reclen, buf + off + 16, sizeof reclen);
      const char *name = buf + off + 19;
      off += reclen;
      char *end;
      long fd = strtol(name, &end, 10);
      if (*end || end == name || fd < 0 || fd == dfd) continue;
      rr__addr a;
      memset(&a, 0, sizeof a);
      a.len = sizeof a.ss;
      int type = 0;
      socklen_t tl = sizeof type;
      /* ENOTSOCK for files and pipes: not ours to look at. */
      if (getsockname((int)fd, (struct sockaddr *)&a.ss, &a.len) != 0 ||
          (a.ss.ss_family != AF_INET && a.ss.ss_family != AF_INET6) || rr__addr_port(&a) != port ||
          getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM)
        continue;
      if (n < max) fds[n++] = (int)fd;
    }
  }
}

int rr__sock_close_port_forked(int port) {
  if (port <= 0) return 0;
  int dfd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return -1;
  int closed = 0;
  for (;;) { /* until a pass finds none: more than one pass's worth are closed in turns */
    int fds[256];
    int n = rr__sockets_on_port(dfd, port, fds, (int)RR__ARRAY_SIZE(fds));
    if (n < 0 && closed == 0) closed = -1;
    if (n <= 0) break;
    for (int i = 0; i < n; i++) close(fds[i]);
    closed += n;
  }
  close(dfd);
  return closed;
}

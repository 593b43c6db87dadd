/* Socket plumbing shared by the rendezvous store, the bootstrap and the TCP transport:
 * addresses, interface choice (RR_SOCKET_IFNAME), listen/connect/accept with deadlines, and
 * whole-buffer send/recv that never block past a deadline. Every failure sets the last error
 * with the address and the errno text. */
#ifndef RR__TRANSPORT_SOCKET_H_
#define RR__TRANSPORT_SOCKET_H_

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct rr__addr {
  struct sockaddr_storage ss;
  socklen_t len;
} rr__addr;

/* Longest text form: "[ffff:...]:65535" with room to spare. */
#define RR__ADDRSTRLEN 64

/* Resolve host (name, IPv4 or IPv6 literal) and port. RR_EADDR if it does not resolve. */
int rr__addr_resolve(const char *host, int port, rr__addr *out);
/* "10.0.0.1:29500" or "[::1]:29500". Returns buf. */
const char *rr__addr_str(const rr__addr *a, char *buf, size_t n);
/* Parse what rr__addr_str printed. */
int rr__addr_parse(const char *s, rr__addr *out);
int rr__addr_port(const rr__addr *a);
void rr__addr_set_port(rr__addr *a, int port);
/* The wildcard address of `family` (AF_INET6, else IPv4) with `port`: where a server
 * listens to be reached on every interface, as torch's TCPStore does. */
void rr__addr_any(int family, int port, rr__addr *out);
int rr__addr_is_loopback(const rr__addr *a);

/* Does interface `ifname` pass the NCCL-style filter `spec`? A comma-separated list of
 * prefixes; a leading '^' excludes what matches; a leading '=' (after '^' if any) asks for
 * exact names. An empty spec matches everything. */
int rr__if_match(const char *spec, const char *ifname);

/* Pick the local address for data sockets. With a spec (RR_SOCKET_IFNAME) the first up
 * interface that matches; without one, the interface whose subnet holds `hint` (the
 * master's address) if any, else the first up interface that is neither loopback nor
 * docker*, else loopback. IPv4 is preferred over IPv6 on the same interface. The port of
 * *out is 0. ifname (may be NULL) receives the interface name. */
int rr__if_select(const char *spec, const rr__addr *hint, rr__addr *out, char *ifname,
                  size_t ifname_len);

/* Listen on addr (port 0: any free port); *bound gets the real address. reuse=1 sets
 * SO_REUSEADDR (needed to reuse a port in TIME_WAIT; a port with a live listener still
 * fails, with RR_EADDR "address in use"). */
int rr__sock_listen(const rr__addr *addr, int backlog, int reuse, int *fd, rr__addr *bound);
/* Connect to `to`, retrying refused/unreachable attempts until deadline_ms (the peer may not
 * be listening yet). RR_EADDR or RR_ETIMEDOUT naming the address on failure. */
int rr__sock_connect(const rr__addr *to, int64_t deadline_ms, int *fd);
int rr__sock_nonblock(int fd, int on);
/* TCP_NODELAY, keep-alive, and SO_SNDBUF/SO_RCVBUF = bufsize when bufsize > 0. */
int rr__sock_tune(int fd, int64_t bufsize);
/* Move exactly n bytes, waiting at most until deadline_ms. A closed connection is RR_EPEER,
 * running out of time RR_ETIMEDOUT. Work on blocking and non-blocking sockets alike. */
int rr__sock_send_all(int fd, const void *buf, size_t n, int64_t deadline_ms);
int rr__sock_recv_all(int fd, void *buf, size_t n, int64_t deadline_ms);
/* Wait for `events` on fd until deadline_ms: RR_OK, RR_ETIMEDOUT or RR_ESYS. */
int rr__sock_wait(int fd, short events, int64_t deadline_ms);

/* In a child forked without exec (common/fork.h): close every TCP socket of this process
 * whose local port is `port`: a server's listener there and every connection it accepted,
 * which the child inherited and must not keep open. Found through /proc/self/fd, not through
 * the server's own records, which its thread (absent in the child) may have been changing
 * at the fork. Uses system calls only (no allocation, no lock). Returns how many it closed,
 * or -1 when /proc cannot be read (nothing closed then). */
int rr__sock_close_port_forked(int port);

#endif /* RR__TRANSPORT_SOCKET_H_ */

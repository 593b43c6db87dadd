/* A port for a test job's rendezvous, chosen outside the kernel's ephemeral range.
 *
 * Why not bind port 0 and read back what the kernel chose: that port comes from the ephemeral
 * range (net.ipv4.ip_local_port_range, 32768-60999 by default), which is also where every
 * outgoing connection of every other test running beside this one takes its local port. Between
 * our closing the probe socket and rank 0 binding the port, another test's connect() can take
 * it, and the job fails with "Address already in use" (CI saw it on torch1.tutorial_spawn).
 * Below the ephemeral range only another test's explicit choice can collide, and the probe bind
 * refuses every port some process already listens on; what is left is two tests choosing the
 * same port within the moment before the first binds it (about 1 in 11000 per pair).
 *
 * Left out as well: 29400-30399, where jobs started as the README writes them take their port
 * unprobed (rrun's and torchrun's default 29500, examples/torch_digits.py's 29400 + pid % 1000;
 * torch{1,2}.readme_install run them beside other tests). */
#ifndef RR_TEST_PORT_H
#define RR_TEST_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum {
  RR_TEST_PORT_LO = 20000,
  RR_TEST_PORT_HI = 32768,
  RR_TEST_PORT_README_LO = 29400, /* [README_LO, README_HI): never picked */
  RR_TEST_PORT_README_HI = 30400
};

/* -1 when no port in the range could be bound in 256 tries. */
static inline int rr_test_free_port(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t x = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec;
  for (int i = 0; i < 256; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
    int port = RR_TEST_PORT_LO + (int)(x % (RR_TEST_PORT_HI - RR_TEST_PORT_LO));
    if (port >= RR_TEST_PORT_README_LO && port < RR_TEST_PORT_README_HI) continue;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    if (ok) return port;
  }
  return -1;
}

#endif

/* transport/ib in a library built where <infiniband/verbs.h> was missing (CMake compiles this
 * file instead of the others of this folder, and says so when configuring). The registry
 * keeps its entry so that every build chooses transports by the same rule: this one never
 * offers itself, RR_DEBUG=INFO and RR_TRANSPORT=ib say why, and sockets carry the data
 * between hosts. The other entries are never reached: nothing connects a transport whose
 * can_connect refuses every peer. */
#include "transport/transport.h"

#include <unistd.h>

#include "common/status.h"

static const char rr__ib_absent_why[] =
    "this library was built without <infiniband/verbs.h> (install libibverbs-dev and rebuild)";

static void rr__ib_absent_publish(rr__peer_info *self) {
  self->ib = 0;
}

const char *rr__ib_not_used(void) {
  return rr__ib_absent_why;
}

static int rr__ib_absent_can_connect(const rr__peer_info *self, const rr__peer_info *peer) {
  (void)self;
  (void)peer;
  return 0;
}

static int rr__ib_absent_setup_sockets(const rr__peer_info *self, const rr__peer_info *peer) {
  (void)self;
  (void)peer;
  return 0;
}

static int rr__ib_absent_connect(const rr__peer_info *self, const rr__peer_info *peer,
                                 int peer_rank, const int *fds, int nfds, int ctrl_fd,
                                 int64_t deadline_ms, rr__conn **conns, int max_lanes,
                                 int *nlanes) {
  (void)self, (void)peer, (void)peer_rank, (void)ctrl_fd, (void)deadline_ms, (void)conns;
  (void)max_lanes;
  for (int i = 0; i < nfds; i++) close(fds[i]); /* ours, as the interface says */
  *nlanes = 0;
  return rr__set_error(RR_ENOTSUP, "ib: %s", rr__ib_absent_why);
}

const rr__transport rr__ib_transport = {
    .name = "ib",
    .publish = rr__ib_absent_publish,
    .can_connect = rr__ib_absent_can_connect,
    .setup_sockets = rr__ib_absent_setup_sockets,
    .connect = rr__ib_absent_connect,
};

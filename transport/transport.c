/* The transport registry and the choice of a transport for each pair of ranks (NCCL keeps
 * the same in src/transport.cc). To add a transport: write its table in its own file,
 * declare it in transport.h and list it here at its priority. */
#include "transport/transport.h"

/* Fastest first: shared memory where both ranks are on one host, InfiniBand verbs between
 * hosts where both have a port up, sockets for everyone. */
const rr__transport *const rr__transports[] = {&rr__shm_transport, &rr__ib_transport,
                                               &rr__tcp_transport, NULL};

void rr__transport_publish(rr__peer_info *self) {
  for (int i = 0; rr__transports[i]; i++)
    if (rr__transports[i]->publish) rr__transports[i]->publish(self);
}

const rr__transport *rr__transport_choose(const rr__peer_info *self, const rr__peer_info *peer) {
  for (int i = 0; rr__transports[i]; i++)
    if (rr__transports[i]->can_connect(self, peer)) return rr__transports[i];
  /* tcp's can_connect always accepts; this line only keeps the contract obvious. */
  return &rr__tcp_transport;
}

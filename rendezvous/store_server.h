/* The TCP store's server thread as its one user, the client side (store_client.c), sees it:
 * the master's rr__store_tcp_open starts it and the master's rr_store_free stops it. The
 * server's state stays private to store_server.c, so the client cannot reach past these. */
#ifndef RR__RENDEZVOUS_STORE_SERVER_H_
#define RR__RENDEZVOUS_STORE_SERVER_H_

#include <stdint.h>

#include "transport/socket.h"

typedef struct rr__server rr__server;

/* Listen on bind_addr (port 0: the kernel picks one), or serve on lfd when it is >= 0 (a
 * listening socket a launcher bound and handed down, taken over also on failure), and
 * start the thread. idle_ms bounds how long a client may stall mid-request or leave its
 * reply unread; a NULL or empty token lets any client in. Sets the last error on failure. */
int rr__srv_start(const rr__addr *bind_addr, int64_t idle_ms, const char *token, int lfd,
                  rr__server **out);
/* The port actually bound: clients on the master need it when bind_addr asked for port 0. */
int rr__srv_port(const rr__server *srv);
/* Why the server gave up (it ran out of descriptors), or NULL while it serves. */
const char *rr__srv_failure(rr__server *srv);
/* Wake the thread, join it and free everything, sockets and keys included. */
void rr__srv_stop(rr__server *srv);
/* The same, for a process that is failing: first every client with no reply under way is
 * left the goodbye (store_proto.h) carrying `why`, so that the ranks waiting on this store
 * name the cause rather than a reset connection; its num is `status` when that is
 * RR_EMISMATCH (a fact about the whole group, which the clients then report as theirs),
 * else 0. */
void rr__srv_stop_because(rr__server *srv, const char *why, int status);

#endif /* RR__RENDEZVOUS_STORE_SERVER_H_ */

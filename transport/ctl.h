/* What transport/comm.c and transport/ctl.c share about a comm's control sockets (private to
 * transport/: other folders use transport/comm.h). */
#ifndef RR__TRANSPORT_CTL_H_
#define RR__TRANSPORT_CTL_H_

#include "transport/comm.h"

/* Send one control message on fd, best effort and never blocking. */
void rr__ctl_send(int fd, uint32_t type, int origin, int status, uint64_t seq, const char *text);
/* Close a peer's control socket under the comm's abort lock. */
void rr__ctl_close(rr__comm *cm, rr__peer *p);
/* How long (ms) an exited peer's still-open control socket is given before it counts as
 * held by another process: -1 when no such wait runs for it, 0 when it is over. */
int64_t rr__exit_grace_left(const rr__comm *cm, const rr__peer *p);
/* Mark peer p's process as exited (its pidfd was readable) and stop watching it. */
void rr__peer_exited(rr__comm *cm, rr__peer *p);
/* Take a peer's goodbye (c, a BYE): it leaves, for the reason its seq gives. */
void rr__ctl_take_bye(rr__peer *p, const rr__ctl *c);
/* Watch the peers on this host by their process (pidfds), once per comm (transport/comm.c). */
void rr__comm_watch_pids(rr__comm *cm);

#endif /* RR__TRANSPORT_CTL_H_ */

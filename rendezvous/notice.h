/* What the launcher tells the rendezvous: rrun's notice that a worker died while the group
 * was being set up (issue 38 item 6), in the one place that both its writer
 * (tools/rrun_notice.c, which does not link the library) and its readers
 * (rendezvous/bootstrap.c, group/pg.c) take it from.
 *
 * Two kinds of keys, in the job's own TCP store (env://: the one rank 0 serves at
 * MASTER_ADDR:MASTER_PORT), named by global rank and never by group id, which rrun cannot
 * know (a world named by a group key is "w-<hash>"):
 *
 *   rr/seat/<rank>.<gen>  a counter. The process of generation <gen> of that rank (0 the
 *                         first, 1 its first replacement, ...) adds 1 right before it
 *                         publishes its record in the world's rendezvous, and goes on only
 *                         when the sum is 1. rrun, once it has reaped that process, adds
 *                         RR__SEAT_DECLARED: a sum of exactly RR__SEAT_DECLARED says the
 *                         process never published its record, and never will (any add of its
 *                         still in flight now yields more than 1), so nobody can have read
 *                         it and a replacement may take its place in this very rendezvous.
 *                         The store orders the two adds: no race between the death and the
 *                         record decides anything.
 *   rr/dead/<rank>        the notice, written after that add:
 *                         "gen=G seat=S inplace=I how=<text> mac=<16 hex digits>"
 *                         S: 1 when the process had taken its seat (its record may be out),
 *                         I: 1 when rrun started generation G + 1 in its place, how: "killed
 *                         by signal SIGKILL (9)" or "exit code 3". A later death of the same
 *                         rank writes over it: the notice speaks of the latest generation.
 *
 * The MAC is SipHash keyed with the job token (RR_JOB_TOKEN) over the rank and the text, so
 * only a holder of the token can write a notice the ranks believe. The library's store admits
 * only clients that prove the token, so there a stranger cannot write at all; in a store that
 * admits anyone (torch's TCPStore, which rrun never writes to) a forged or altered notice is
 * ignored, a deleted one only leaves the ranks waiting for their timeout as before. Without a
 * token the MAC is keyed with zeros and nobody checks it, as with every other record then.
 */
#ifndef RR__RENDEZVOUS_NOTICE_H_
#define RR__RENDEZVOUS_NOTICE_H_

#include <stdint.h>
#include <stdio.h>

#include "common/siphash.h"

#define RR__NOTICE_DEAD_KEY "rr/dead/%d"    /* global rank */
#define RR__NOTICE_SEAT_KEY "rr/seat/%d.%d" /* global rank, generation */
#define RR__SEAT_DECLARED 1000              /* what rrun adds to a dead process's seat */
#define RR__NOTICE_HOW_MAX 96               /* bytes of the "how" text, NUL included */
#define RR__NOTICE_MAX 256                  /* bytes of a whole notice */

/* The MAC of a notice's text (everything before " mac=") for global rank `rank`; never 0. */
static inline uint64_t rr__notice_mac(const uint8_t key[16], int rank, const char *text) {
  char ctx[RR__NOTICE_MAX + 32];
  int n = snprintf(ctx, sizeof ctx, "rr-dead-v1/%d/%s", rank, text);
  if (n < 0) n = 0;
  if (n >= (int)sizeof ctx) n = (int)sizeof ctx - 1;
  uint64_t h = rr__siphash(key, ctx, (size_t)n);
  return h ? h : 1;
}

#endif /* RR__RENDEZVOUS_NOTICE_H_ */

/* The readers of rrun's notices (rendezvous/notice.h, where the writer's side is): reading
 * the notice of a global rank's death, and what a setup step that waits for members looks at
 * between its slices of waiting (the records in rendezvous/bootstrap.c, the connections in
 * rendezvous/lanes.c). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/status.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/notice.h"

int rr__dead_notice_read(rr_store *store, const uint8_t *token_key, int rank,
                         rr__dead_notice *out) {
  char key[48], buf[RR__NOTICE_MAX];
  snprintf(key, sizeof key, RR__NOTICE_DEAD_KEY, rank);
  const char *k = key;
  int exists = 0;
  RR__CHECK(rr_store_check(store, &k, 1, &exists));
  if (!exists) return 0;
  void *v = NULL;
  size_t len = 0;
  RR__CHECK(rr_store_get(store, key, &v, &len));
  int ok = len < sizeof buf;
  if (ok) {
    memcpy(buf, v, len);
    buf[len] = '\0';
  }
  free(v);
  char *m = ok ? strstr(buf, " mac=") : NULL;
  uint64_t mac = 0;
  if (m) {
    *m = '\0';
    if (sscanf(m + 5, "%16" SCNx64, &mac) != 1) mac = 0;
  }
  int pos = -1;
  memset(out, 0, sizeof *out);
  ok = m &&
       sscanf(buf, "gen=%d seat=%d inplace=%d how=%n", &out->gen, &out->seat, &out->inplace,
              &pos) == 3 &&
       pos > 0;
  if (ok && token_key) ok = mac == rr__notice_mac(token_key, rank, buf);
  if (!ok) return 2;
  snprintf(out->how, sizeof out->how, "%s", buf + pos);
  for (char *c = out->how; *c; c++) /* the launcher's words, never its bytes */
    if (*c < 0x20 || *c > 0x7e) *c = '?';
  return 1;
}

/* Has rrun said that member p died with nobody in its place? Then RR_EPEER with the error
 * naming it (`when`: "before joining the rendezvous", ...), else RR_OK. A store that fails
 * while the records are awaited (!mesh) is not the cause of anything: the wait goes on and
 * meets that failure itself (rr__gather names who was missing). While connections are awaited
 * (mesh), a store that ended with the serving rank's goodbye from a failed init (group/pg.c)
 * is the cause: the group's rank 0 gave up on this setup, often on that same death, and took
 * the notice with the store. One that closed otherwise (rank 0 may be through its own setup
 * and gone on: over TCP it does not wait for the others' last connections) only ends the
 * looks: the wait goes on as without rrun. */
int rr__member_dead(rr__member_watch *w, int p, const char *when, int mesh) {
  if (!w || !w->store || w->store_gone) return RR_OK;
  rr__dead_notice dn;
  char saved[RR__ERRMSG_MAX];
  snprintf(saved, sizeof saved, "%s", rr__error());
  int got = rr__dead_notice_read(w->store, w->token_key, w->global_ranks[p], &dn);
  if (got < 0 && mesh && strstr(rr__error(), RR__STORE_HOST_FAILED))
    return rr__prefix_error(got, "waiting for rank %d's connections", w->global_ranks[p]);
  if (got < 0) {
    w->store_gone = mesh;
    rr__copy_error(saved);
  }
  if (got == 2 && !w->warned) {
    w->warned = 1;
    RR__LOG_WARN(RR__SUB_INIT,
                 "group %s: ignoring a notice in the store that rank %d died: it does not carry "
                 "this job's token (written by someone without RR_JOB_TOKEN?) or is malformed",
                 w->group_id, w->global_ranks[p]);
  }
  if (got != 1) return RR_OK;
  if (dn.inplace) {
    /* Its replacement joins this very rendezvous (it never published a record, the seat
     * says, so there is nothing stale to read): keep waiting, within the same deadline. */
    if (!w->replaced)
      RR__LOG_INFO(RR__SUB_INIT,
                   "group %s: rank %d (generation %d) died %s (%s); rrun started "
                   "a replacement in its place",
                   w->group_id, w->global_ranks[p], dn.gen, when, dn.how);
    w->replaced = 1;
    return RR_OK;
  }
  return rr__set_error(RR_EPEER, "rank %d died %s (%s, rrun says)", w->global_ranks[p], when,
                       dn.how);
}

/*
 * rrun_notice_forge — writes a notice that rank RANK died (rendezvous/notice.h) into the job's
 * store, as rrun does, for tests/test_rrun.sh's setup_death_forged case:
 *
 *   rrun_notice_forge RANK MAC_TOKEN HOW
 *
 * It connects to the store at MASTER_ADDR:MASTER_PORT proving RR_JOB_TOKEN (the library's
 * store admits nobody else) and sets rr/dead/RANK to "gen=0 seat=0 inplace=0 how=HOW" with a
 * MAC keyed with MAC_TOKEN: the job's token makes it rrun's word, any other a forgery that
 * the ranks must ignore (what a writer without the token could at best put in a store that
 * lets anyone write). Exits 0 once the store took it, 1 on an error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rendezvous/notice.h"
#include "rendezvous/store.h"
#include "ringreduce/ringreduce.h"

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: rrun_notice_forge RANK MAC_TOKEN HOW\n");
    return 2;
  }
  const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
  if (!addr || !port) {
    fprintf(stderr, "rrun_notice_forge: MASTER_ADDR and MASTER_PORT must be set\n");
    return 1;
  }
  int rank = atoi(argv[1]);
  rr_store *store;
  if (rr__store_tcp_open(addr, atoi(port), 0, 10000, getenv("RR_JOB_TOKEN"), &store) != RR_OK) {
    fprintf(stderr, "rrun_notice_forge: %s\n", rr_last_error());
    return 1;
  }
  uint8_t key[16];
  rr__token_key(argv[2], key);
  char text[RR__NOTICE_MAX], value[RR__NOTICE_MAX + 32], name[48];
  snprintf(text, sizeof text, "gen=0 seat=0 inplace=0 how=%s", argv[3]);
  snprintf(value, sizeof value, "%s mac=%016llx", text,
           (unsigned long long)rr__notice_mac(key, rank, text));
  snprintf(name, sizeof name, RR__NOTICE_DEAD_KEY, rank);
  int st = rr_store_set(store, name, value, strlen(value));
  if (st != RR_OK) fprintf(stderr, "rrun_notice_forge: %s\n", rr_last_error());
  rr_store_free(store);
  return st == RR_OK ? 0 : 1;
}

/* The registry of objects a forked child must let go of (common/fork.h): one list, one lock,
 * and pthread_atfork handlers that walk the list. */
#include "common/fork.h"

#include <pthread.h>
#include <string.h>

#include "common/status.h"

/* A circular list around a sentinel; a hook is registered while its `next` is set. */
static rr__fork_hook rr__forks = {.prev = &rr__forks, .next = &rr__forks};
static pthread_mutex_t rr__forks_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t rr__forks_once = PTHREAD_ONCE_INIT;
static int rr__forks_err; /* pthread_atfork's error, once */

/* Before fork(): hold the registry (so no hook is added or freed half way) and let each
 * object take its own lock. The registry's lock is taken first everywhere and no hook's
 * function takes it, so this order cannot deadlock. */
static void rr__fork_prepare(void) {
  pthread_mutex_lock(&rr__forks_mu);
  for (rr__fork_hook *h = rr__forks.next; h != &rr__forks; h = h->next)
    if (h->prepare) h->prepare(h);
}

static void rr__fork_parent(void) {
  for (rr__fork_hook *h = rr__forks.next; h != &rr__forks; h = h->next)
    if (h->parent) h->parent(h);
  pthread_mutex_unlock(&rr__forks_mu);
}

/* In the child the objects stay registered: the child may free them (they are unlinked
 * then) or fork again (their hooks then find nothing left to close). The lock was taken by
 * this very thread in prepare, so unlocking it here is sound for a default mutex. */
static void rr__fork_child(void) {
  for (rr__fork_hook *h = rr__forks.next; h != &rr__forks; h = h->next)
    if (h->child) h->child(h);
  pthread_mutex_unlock(&rr__forks_mu);
}

static void rr__fork_install(void) {
  rr__forks_err = pthread_atfork(rr__fork_prepare, rr__fork_parent, rr__fork_child);
}

int rr__fork_watch(rr__fork_hook *h) {
  pthread_once(&rr__forks_once, rr__fork_install);
  if (rr__forks_err != 0)
    return rr__set_error(RR_ESYS, "pthread_atfork: %s", strerror(rr__forks_err));
  pthread_mutex_lock(&rr__forks_mu);
  h->prev = rr__forks.prev;
  h->next = &rr__forks;
  rr__forks.prev->next = h;
  rr__forks.prev = h;
  pthread_mutex_unlock(&rr__forks_mu);
  return RR_OK;
}

void rr__fork_unwatch(rr__fork_hook *h) {
  pthread_mutex_lock(&rr__forks_mu);
  if (h->next) {
    h->prev->next = h->next;
    h->next->prev = h->prev;
    h->prev = h->next = NULL;
  }
  pthread_mutex_unlock(&rr__forks_mu);
}

/* What a process forked without exec does with the library's objects it inherits.
 *
 * fork() copies every descriptor: a child (a DataLoader worker, a fork-start pool, a forked
 * logger) holds the group's sockets as long as it lives, so when the rank itself dies its
 * peers see no connection close and wait out RR_TIMEOUT for it. The child cannot use the
 * group anyway: its worker thread, and whatever thread held the group's locks, stayed in the
 * parent. So every object that holds descriptors of a group or a store registers a hook here;
 * in the child, right after fork() (pthread_atfork), each hook closes its object's
 * descriptors (close() only: shutdown() would end the connection for the parent too), sets
 * them to -1 so nothing in the child closes them again (the numbers may be reused by then),
 * and marks the object so that a later call on it in the child fails with a clear error.
 *
 * exec closes them anyway (every descriptor of the library is close-on-exec); vfork and
 * posix_spawn run no hooks and need none. A clone() that bypasses the C library's fork runs
 * no hook either: ranks on one host also watch each other's process (transport/comm.c). */
#ifndef RR__COMMON_FORK_H_
#define RR__COMMON_FORK_H_

typedef struct rr__fork_hook {
  struct rr__fork_hook *prev, *next; /* the registry's list (rr__fork_watch) */
  /* Each optional. prepare runs in the parent just before fork() and may take the object's
   * lock, so that the child sees its fields consistent; parent and child run just after, in
   * the parent and in the child, and release what prepare took. In the child only the
   * thread that called fork() exists: child must not wait for anything. */
  void (*prepare)(struct rr__fork_hook *h);
  void (*parent)(struct rr__fork_hook *h);
  void (*child)(struct rr__fork_hook *h);
} rr__fork_hook;

/* Register h (its functions set, its links untouched) until rr__fork_unwatch. The first call
 * installs the process's pthread_atfork handlers. RR_ESYS if they cannot be installed (the
 * object then works as before, without the fork protection); RR_OK otherwise. */
int rr__fork_watch(rr__fork_hook *h);
/* Unregister h (no-op if it was never registered). Call before freeing the object: a fork
 * from another thread must not find it half freed. */
void rr__fork_unwatch(rr__fork_hook *h);

#endif /* RR__COMMON_FORK_H_ */

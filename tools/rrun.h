/* What rrun's files share: the parsed command line, the launcher's state (one launcher, its
 * workers and their output streams) and the few calls one file makes into another. rrun runs
 * on one thread, so none of this is locked. */
#ifndef RR__TOOLS_RRUN_H_
#define RR__TOOLS_RRUN_H_

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

enum { EXIT_USAGE = 2, EXIT_EXEC = 127 };

/* Longest line that --tee keeps in one piece; a longer one comes out in prefixed pieces. */
#define RRUN_LINE_MAX 65536
/* Room for "[rankN]: " with any int N, and the newline. */
#define RRUN_PREFIX_MAX 32
/* torchrun's --master-port default. */
#define RRUN_DEFAULT_PORT 29500

/* Retries a system call interrupted by a signal (possible only while a signal is unblocked,
 * which in rrun is never, but the retry costs nothing and keeps each call site honest). */
#define RRUN_SYS(call)                       \
  ({                                         \
    __typeof__(call) sys_rc_;                \
    do sys_rc_ = (call);                     \
    while (sys_rc_ == -1 && errno == EINTR); \
    sys_rc_;                                 \
  })

/* ------------------------------------------------------------------------------------------
 * Command line, spelled as torchrun's.
 */
enum { RRUN_BIND_NONE, RRUN_BIND_CORE, RRUN_BIND_SLICE };
typedef struct {
  int nproc;
  int nnodes;
  int node_rank;
  const char *master_addr;
  int master_port;
  bool standalone;
  bool nnodes_set, node_rank_set, addr_set, port_set;
  int max_restarts;
  bool keep_going; /* a failed worker does not stop the others (issue 26 item 4) */
  int replace;     /* --replace N: start up to N replacements that join the running group */
  int bind;        /* --bind-to: RRUN_BIND_NONE, _CORE or _SLICE (default; rrun_bind.c) */
  bool bind_asked; /* --bind-to or RR_BIND_TO given: a binding that cannot be done fails */
  int tee;         /* bit 0: prefix stdout, bit 1: prefix stderr */
  double grace_s;
  const char *run_id; /* --rdzv-id; NULL: "none" */
  char **argv;        /* the program and its arguments */
} options;

/* ------------------------------------------------------------------------------------------
 * Launcher state.
 */

/* One worker stream that --tee prefixes: the read end of its pipe and the unfinished line. */
typedef struct {
  int fd;     /* -1 when not piped or closed */
  int target; /* STDOUT_FILENO or STDERR_FILENO */
  char *buf;  /* RRUN_LINE_MAX bytes */
  size_t len;
  size_t dropped; /* bytes dropped for a stalled reader, not yet reported */
} stream;

typedef struct {
  int local_rank, rank;
  pid_t pid;      /* 0 until started */
  bool alive;     /* started and not reaped */
  bool signalled; /* rrun sent it a signal: its death is not a failure of its own */
  bool failed;    /* exited non-zero or was killed while nobody asked it to stop */
  bool joiner;    /* a replacement: started with RR_GROW_JOIN=1 (rr_pg_join) */
  int gen;        /* which process of its rank: 0 the first, g + 1 one started in place of g
                   * before the group formed (RR_RANK_GENERATION, rrun_notice.c) */
  int status;     /* wait status, once reaped */
  char prefix[RRUN_PREFIX_MAX];
  size_t prefix_len;
  stream out[2]; /* [0] stdout, [1] stderr */
} worker;

/* rrun_notice.c: what rrun tells the job's rendezvous store about deaths. */
typedef struct {
  bool ready; /* the store's address is known (MASTER_ADDR, MASTER_PORT) */
  bool gone;  /* what answers there is not this job's store: no more tries this attempt */
  char host[256], port[16];
  unsigned char key[16]; /* the job token's key (all zeros without one) */
  double patience_ms;    /* how long a death stays worth telling: the rendezvous's timeout */
  double retry_at;       /* CLOCK_MONOTONIC ms of the next try of the first pending death */
  int *pending;          /* worker slots whose death is still to be told, oldest first */
  double *give_up_at;    /* ... and when each stops being worth telling */
  int npending;
  pid_t tomb_pid; /* the process answering at the store's address for a dead rank 0, or 0 */
} rr__notifier;

typedef struct {
  const options *opt;
  int sigfd;
  sigset_t orig_mask;         /* restored in workers */
  struct sigaction orig_pipe; /* SIGPIPE and SIGCHLD dispositions, restored in workers */
  struct sigaction orig_chld;
  worker *w; /* nproc + replace entries, nw of them in use this attempt */
  int nw;
  int replaced; /* replacements started this attempt */
  struct pollfd *pfd;
  struct {
    worker *w;
    stream *s;
  } * pwatch;     /* the worker stream behind pfd[i], i >= 1 */
  bool broken[3]; /* rrun's stdout/stderr failed (reader gone): drop prefixed output */
  char out[RRUN_LINE_MAX + RRUN_PREFIX_MAX];
  size_t out_len;
  /* Per attempt. */
  int restart;
  int live;
  bool stopping, killed;
  double deadline;
  int stop_sig;      /* what rrun sent when it began stopping the group */
  int first_failed;  /* index of the first failed worker, -1 if none */
  int signal_in;     /* first signal rrun received, 0 if none */
  bool launch_error; /* rrun itself could not start a worker */
  int keeper_fd;     /* rrun's end of the keeper's socket (rrun_keeper.c), -1: none */
  rr__notifier nt;
} launcher;

/* rrun_flags.c. Exits (2, with a message) on any mistake, and for --help and --version. */
void rr__parse_args(int argc, char **argv, options *o);

/* rrun_output.c: rrun's own messages and the prefixed output of workers. */
void rr__output_init(int wake_fd);
int rr__write_all(int fd, const char *buf, size_t len);
__attribute__((format(printf, 1, 2))) void rr__say(const char *fmt, ...);
void rr__emit_lines(launcher *L, const worker *w, stream *s, bool eof);
void rr__stream_close(stream *s);
void rr__stream_read(launcher *L, const worker *w, stream *s, bool drain);

/* rrun_bind.c: one CPU rrun may run on: its number, its package and its core (the lowest CPU
 * among its hyperthreads), -1 where unknown. */
typedef struct {
  int cpu, package, core;
} rr__cpu_place;
/* The CPUs local rank k of nproc workers gets under --bind-to mode, written to out (room for
 * count); returns how many, 0 when the worker is left unbound. The rules are at the top of
 * rrun_bind.c. */
int rr__bind_share(const rr__cpu_place *cpus, int count, int mode, int nproc, int local_rank,
                   int *out);

/* rrun_workers.c. The job's shared environment (rrun.c) and each worker's own (RANK, ...)
 * are both set with these in rrun's environment, for fork to pass on. */
int rr__set_env(const char *name, const char *value);
int rr__set_env_int(const char *name, long value);
/* Runs the group, restarting it as --max-restarts allows; returns rrun's exit code. */
int rr__run_job(launcher *L);
/* "exit code 3" or "killed by signal SIGKILL (9)", for a wait status. */
void rr__describe_status(int status, char *buf, size_t size);
/* --replace, once it is known how the dead worker w is to be replaced: in its place before
 * the group formed (inplace), or as a newcomer joining the running group; nothing when the
 * replacements are used up or nobody is left running. */
void rr__replace_dead(launcher *L, const worker *w, bool inplace);

/* rrun_notice.c: telling the job's rendezvous that a worker died (issue 38 item 6; the design
 * is at the top of the file). Setup reads the store's address and the token from rrun's
 * environment, once the job's is set. */
void rr__notice_setup(launcher *L);
void rr__notice_attempt(launcher *L);     /* before a group's attempt starts */
void rr__notice_attempt_end(launcher *L); /* after its last worker is reaped */
/* The failed worker w (not rank 0, not a newcomer) is told about, now or once the store is up;
 * rr__replace_dead follows in either case. */
void rr__notice_death(launcher *L, worker *w);
/* Rank 0 (w) ended, and its store with it: pending deaths are given up (and replaced as
 * newcomers). stand_in (it failed while others run on): a process of rrun's answers at the
 * store's address in its place, so that a rank arriving late fails at once, naming rank 0's
 * death, instead of retrying until its timeout. */
void rr__notice_rank0_gone(launcher *L, const worker *w, bool stand_in);
/* For poll(): ms until a pending death is tried again (-1: none); then the retry. */
int rr__notice_timeout_ms(const launcher *L);
void rr__notice_retry(launcher *L);

/* rrun_keeper.c: the process that kills the workers' process groups when rrun ends, even by
 * SIGKILL. Start it before the first worker; watch each worker's group as it starts (before
 * it can be reaped: the keeper holds a pidfd of it) and forget it once the worker is reaped
 * (it stays listed while anything is left in it). */
int rr__keeper_start(launcher *L);
void rr__keeper_watch(launcher *L, pid_t pgid);
void rr__keeper_forget(launcher *L, pid_t pgid);

#endif /* RR__TOOLS_RRUN_H_ */

/* Everything rrun writes: its own "rrun: " messages and, for the streams --tee prefixes, the
 * workers' output, read from a pipe per stream and written with "[rankR]: " before each line.
 * Streams that are not prefixed never come through here: those workers write straight to
 * rrun's stdout/stderr. A line is never split across two write()s, so the two kinds of text
 * cannot mix in the middle of one (only a line longer than RRUN_LINE_MAX comes out in
 * pieces, each with its prefix).
 *
 * Output never holds up supervision (issue 22, item 5): a reader that stops reading (`rrun
 * --tee 3 ... | sleep 25`) would otherwise block rrun in write() while signals and exited
 * workers wait. So rrun writes through its own non-blocking descriptions of its stdout and
 * stderr, waits at most RRUN_WRITE_PATIENCE_MS for a reader that takes nothing (and not at
 * all while a signal or an exited worker is pending), then drops what it was writing and says
 * how much. A slow reader that keeps reading loses nothing.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "rrun.h"

/* How long rrun waits for a reader of its stdout or stderr that takes nothing. */
#define RRUN_WRITE_PATIENCE_MS 1000

/* rrun's ways to write its stdout (1) and stderr (2) without blocking. */
static struct {
  int fd[3];       /* its own non-blocking description of that stream; -1: the stream itself */
  bool sock[3];    /* a socket (a journal): send with MSG_DONTWAIT instead */
  bool stalled[3]; /* the last write gave up: drop at once until the reader takes something */
  int wake_fd;     /* readable when rrun has something better to do than wait (its signalfd) */
} g_out = {{-1, -1, -1}, {false}, {false}, -1};

/* O_NONBLOCK on stdout itself would change it for everyone who shares it (the shell, workers
 * writing to it directly), so rrun opens the pipe or terminal again, for itself alone. A
 * regular file never waits for a reader and is written as it is. */
void rr__output_init(int wake_fd) {
  g_out.wake_fd = wake_fd;
  for (int t = STDOUT_FILENO; t <= STDERR_FILENO; t++) {
    struct stat st;
    if (fstat(t, &st) != 0) continue;
    g_out.sock[t] = S_ISSOCK(st.st_mode);
    if (!S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode)) continue;
    char path[32];
    snprintf(path, sizeof path, "/proc/self/fd/%d", t);
    /* On failure (no /proc) rrun writes the stream as it is, as before: it may then block. */
    g_out.fd[t] = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  }
}

static ssize_t write_some(int target, const char *buf, size_t len) {
  int fd = g_out.fd[target] >= 0 ? g_out.fd[target] : target;
  if (g_out.sock[target]) return send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  return write(fd, buf, len);
}

/* Writes buf to rrun's stdout or stderr (target). Returns how many bytes it dropped because
 * the reader took nothing for RRUN_WRITE_PATIENCE_MS (or while rrun had to attend to a
 * signal), or -1 with errno on an error (EPIPE: the reader is gone). */
static ssize_t write_out(int target, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write_some(target, buf, len);
    if (n >= 0) {
      buf += n;
      len -= (size_t)n;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return -1;
    if (g_out.stalled[target]) return (ssize_t)len;
    struct pollfd p[2] = {
        {.fd = g_out.fd[target] >= 0 ? g_out.fd[target] : target, .events = POLLOUT},
        {.fd = g_out.wake_fd, .events = POLLIN}};
    int r = RRUN_SYS(poll(p, g_out.wake_fd >= 0 ? 2 : 1, RRUN_WRITE_PATIENCE_MS));
    if (r < 0) return -1;
    if (r == 0 || (p[1].revents && !(p[0].revents & POLLOUT))) {
      g_out.stalled[target] = r == 0; /* a pending signal says nothing about the reader */
      return (ssize_t)len;
    }
  }
  g_out.stalled[target] = false;
  return 0;
}

/* ------------------------------------------------------------------------------------------
 * Messages. Each goes out in one write() so it does not mix with worker output mid-line.
 */

/* Writes all of buf, waiting when fd is non-blocking and full. Returns 0 or -1 with errno.
 * For --help and --version, before there is a job to supervise. */
int rr__write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n >= 0) {
      buf += n;
      len -= (size_t)n;
    } else if (errno == EAGAIN) {
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      if (RRUN_SYS(poll(&p, 1, -1)) < 0) return -1;
    } else if (errno != EINTR) {
      return -1;
    }
  }
  return 0;
}

void rr__say(const char *fmt, ...) {
  char line[1024];
  size_t len = (size_t)snprintf(line, sizeof line, "rrun: ");
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line + len, sizeof line - len, fmt, ap);
  va_end(ap);
  if (n > 0) len += (size_t)n;
  if (len > sizeof line - 2) len = sizeof line - 2; /* truncated: keep room for the newline */
  line[len++] = '\n';
  /* If stderr is gone or stalled there is nowhere left to report that: the result is unused. */
  (void)write_out(STDERR_FILENO, line, len);
}

/* ------------------------------------------------------------------------------------------
 * Prefixed output.
 */
static void flush_out(launcher *L, stream *s) {
  int target = s->target;
  ssize_t dropped = 0;
  if (L->out_len > 0 && !L->broken[target] &&
      (dropped = write_out(target, L->out, L->out_len)) < 0) {
    /* Typically EPIPE: whoever read our output went away. Workers that write directly would
     * get SIGPIPE; rrun drops the output but keeps supervising. */
    L->broken[target] = true;
    if (target != STDERR_FILENO) rr__say("writing worker output: %s; dropping it", strerror(errno));
  }
  if (dropped > 0) s->dropped += (size_t)dropped;
  L->out_len = 0;
}

/* Says what a stalled reader cost, once it reads again or the stream ends. */
static void report_dropped(const worker *w, stream *s) {
  if (s->dropped == 0) return;
  rr__say(
      "dropped %zu bytes of rank %d's output to %s: the reader took nothing for %g s (rrun "
      "does not let its output hold up supervising the job)",
      s->dropped, w->rank, s->target == STDOUT_FILENO ? "stdout" : "stderr",
      RRUN_WRITE_PATIENCE_MS / 1000.0);
  s->dropped = 0;
}

/* Queues "[rankR]: " + line + "\n"; a line is never split between two writes. */
static void emit_line(launcher *L, const worker *w, stream *s, const char *p, size_t n) {
  size_t need = w->prefix_len + n + 1;
  if (L->out_len + need > sizeof L->out) flush_out(L, s);
  memcpy(L->out + L->out_len, w->prefix, w->prefix_len);
  memcpy(L->out + L->out_len + w->prefix_len, p, n);
  L->out[L->out_len + need - 1] = '\n';
  L->out_len += need;
}

/* Emits every complete line in s; at EOF also the unfinished one, and when the buffer is full
 * without a newline, its content as one piece (a line longer than the buffer). */
void rr__emit_lines(launcher *L, const worker *w, stream *s, bool eof) {
  size_t start = 0;
  for (;;) {
    char *nl = memchr(s->buf + start, '\n', s->len - start);
    if (!nl) break;
    size_t end = (size_t)(nl - s->buf);
    emit_line(L, w, s, s->buf + start, end - start);
    start = end + 1;
  }
  size_t rest = s->len - start;
  if (rest > 0 && (eof || rest == RRUN_LINE_MAX)) {
    emit_line(L, w, s, s->buf + start, rest);
    start = s->len;
    rest = 0;
  }
  memmove(s->buf, s->buf + start, rest);
  s->len = rest;
  flush_out(L, s);
  if (eof || !g_out.stalled[s->target]) report_dropped(w, s);
}

void rr__stream_close(stream *s) {
  if (s->fd >= 0 && close(s->fd) != 0) rr__say("close: %s", strerror(errno));
  s->fd = -1;
  free(s->buf);
  s->buf = NULL;
  s->len = 0;
}

/* Reads what the worker wrote: one read (fair to the other workers) or, with drain, what the
 * pipe holds now. Not "until empty": a process the worker left behind could keep writing and
 * hold rrun here forever. EOF flushes the last partial line and closes the pipe. */
void rr__stream_read(launcher *L, const worker *w, stream *s, bool drain) {
  if (s->fd < 0) return;
  int avail = 0;
  if (drain && ioctl(s->fd, FIONREAD, &avail) != 0) {
    rr__say("reading output of rank %d: ioctl(FIONREAD): %s", w->rank, strerror(errno));
    avail = 0;
  }
  size_t left = drain && avail > 0 ? (size_t)avail : 1;
  for (;;) {
    /* emit_lines leaves the buffer with room: a full buffer goes out as one piece. */
    ssize_t n = read(s->fd, s->buf + s->len, RRUN_LINE_MAX - s->len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n > 0) {
      s->len += (size_t)n;
      rr__emit_lines(L, w, s, false);
      if ((size_t)n >= left) return;
      left -= (size_t)n;
      continue;
    }
    if (n < 0) rr__say("reading output of rank %d: %s", w->rank, strerror(errno));
    rr__emit_lines(L, w, s, true); /* EOF (or a broken pipe): the last, unfinished line */
    rr__stream_close(s);
    return;
  }
}

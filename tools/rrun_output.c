/* Everything rrun writes: its own "rrun: " messages and, for the streams --tee prefixes, the
 * workers' output, read from a pipe per stream and written with "[rankR]: " before each line.
 * Streams that are not prefixed never come through here: those workers write straight to
 * rrun's stdout/stderr. A line is never split across two write()s, so the two kinds of text
 * cannot mix in the middle of one (only a line longer than RRUN_LINE_MAX comes out in
 * pieces, each with its prefix).
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>

#include "rrun.h"

/* ------------------------------------------------------------------------------------------
 * Messages. Each goes out in one write() so it does not mix with worker output mid-line.
 */

/* Writes all of buf, waiting when fd is non-blocking and full. Returns 0 or -1 with errno. */
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
  /* If stderr is gone there is nowhere left to report that, so the result is not used. */
  (void)rr__write_all(STDERR_FILENO, line, len);
}

/* ------------------------------------------------------------------------------------------
 * Prefixed output.
 */
static void flush_out(launcher *L, int target) {
  if (L->out_len > 0 && !L->broken[target] && rr__write_all(target, L->out, L->out_len) != 0) {
    /* Typically EPIPE: whoever read our output went away. Workers that write directly would
     * get SIGPIPE; rrun drops the output but keeps supervising. */
    L->broken[target] = true;
    if (target != STDERR_FILENO) rr__say("writing worker output: %s; dropping it", strerror(errno));
  }
  L->out_len = 0;
}

/* Queues "[rankR]: " + line + "\n"; a line is never split between two writes. */
static void emit_line(launcher *L, const worker *w, int target, const char *p, size_t n) {
  size_t need = w->prefix_len + n + 1;
  if (L->out_len + need > sizeof L->out) flush_out(L, target);
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
    emit_line(L, w, s->target, s->buf + start, end - start);
    start = end + 1;
  }
  size_t rest = s->len - start;
  if (rest > 0 && (eof || rest == RRUN_LINE_MAX)) {
    emit_line(L, w, s->target, s->buf + start, rest);
    start = s->len;
    rest = 0;
  }
  memmove(s->buf, s->buf + start, rest);
  s->len = rest;
  flush_out(L, s->target);
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

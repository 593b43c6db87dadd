/* Rank and chunk arithmetic shared by every ring and chain algorithm (UCC keeps the same in
 * src/coll_patterns/ring.h), so no algorithm works out its neighbours or cuts a buffer on
 * its own. The ring runs 0 -> 1 -> ... -> n-1 -> 0 over group ranks. */
#ifndef RR__RING_RING_H_
#define RR__RING_RING_H_

#include <stddef.h>

#include "common/util.h"

static inline int rr__left(int r, int n) {
  return rr__mod(r - 1, n);
}
static inline int rr__right(int r, int n) {
  return rr__mod(r + 1, n);
}

/* Chunk i of `count` elements split over n ranks as evenly as possible: the first
 * count % n chunks get one extra element. */
static inline size_t rr__chunk_off(size_t count, int n, int i) {
  size_t base = count / (size_t)n, extra = count % (size_t)n;
  return (size_t)i * base + ((size_t)i < extra ? (size_t)i : extra);
}
static inline size_t rr__chunk_len(size_t count, int n, int i) {
  return count / (size_t)n + ((size_t)i < count % (size_t)n ? 1 : 0);
}

#endif /* RR__RING_RING_H_ */

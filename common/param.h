/* Tunables, declared once (as NCCL_PARAM): field, environment variable, default, meaning.
 * Read from the environment once per process and cached; docs/env.md lists the same table.
 * Size values accept K, M and G suffixes (powers of 1024). */
#ifndef RR__COMMON_PARAM_H_
#define RR__COMMON_PARAM_H_

#include <stdint.h>

/* XX(field, variable, default, lowest, highest, meaning). A value outside [lowest, highest],
 * or one that does not parse, fails rr_init_process_group (and rr_spawn) with RR_EENV
 * naming the variable and its range: a timeout of "inf" or 1e-9 s, a segment of 1 byte, are
 * mistakes to report, not to clamp or wrap around. */
#define RR__INT_PARAMS(XX)                                                                    \
  XX(nsocks, "RR_NSOCKS", 2, 1, 16, "TCP data sockets per peer")                              \
  XX(seg_bytes, "RR_SEG_BYTES", 128 * 1024, 4096, 64 << 20, "pipeline segment size in bytes") \
  XX(slots, "RR_SLOTS", 4, 2, 64, "receive segments in flight per step")                      \
  XX(ipc_seg_bytes, "RR_IPC_SEG_BYTES", 4 << 20, 4096, 64 << 20,                              \
     "segment size of collectives through CUDA IPC (device buffers, ranks on one host)")      \
  XX(small_bytes, "RR_SMALL_BYTES", 64 * 1024, 0, (int64_t)1 << 40,                           \
     "all-reduce up to this many bytes uses recursive doubling (RR_ALGO=auto)")               \
  XX(sockbuf, "RR_SOCKBUF", 4 * 1024 * 1024, 0, 1 << 30,                                      \
     "socket buffer bytes (0: kernel autotuning)")                                            \
  XX(spin_us, "RR_SPIN_US", -1, -1, 1000000,                                                  \
     "microseconds a blocking call polls before sleeping (unset: 50, or 100 yielding the "    \
     "core when this host's ranks outnumber its cores)")                                      \
  XX(spin_yield, "RR_SPIN_YIELD", -1, -1, 1,                                                  \
     "1: a blocking call's polling yields the core between polls (ranks share cores); 0: "    \
     "it does not; unset: yield when this host's ranks outnumber its cores (RR_HOST_CPUS)")   \
  XX(host_cpus, "RR_HOST_CPUS", 0, 0, 1 << 20,                                                \
     "the cores this host's ranks share (rrun sets it when it binds them); 0: the CPUs "      \
     "this process may run on")                                                               \
  XX(cuda_direct, "RR_CUDA_DIRECT", 1, 0, 1,                                                  \
     "1: all_reduce, reduce_scatter, all_gather, broadcast and reduce among ranks that all "  \
     "share one GPU run as one kernel on the lowest rank (docs/cuda.md); 0: the ring")        \
  XX(cuda_direct_bytes, "RR_CUDA_DIRECT_BYTES", 1LL << 40, 0, 1LL << 40,                      \
     "the one-kernel form (RR_CUDA_DIRECT) takes calls of at most this many bytes; larger "   \
     "ones run the ring (not yet measured on a GPU: docs/cuda.md, Small calls and fixed "     \
     "costs)")                                                                                \
  XX(cuda_ipc, "RR_CUDA_IPC", 1, 0, 1,                                                        \
     "1: device buffers of ranks on one host go device to device through CUDA IPC "           \
     "(all_reduce, reduce_scatter, all_gather, broadcast; docs/cuda.md); 0: staged")          \
  XX(cuda_pipe, "RR_CUDA_PIPE", 1, 0, 1,                                                      \
     "1: ring collectives on device buffers over host lanes (TCP, verbs, shm without CUDA "   \
     "IPC) pipeline each segment through pinned memory and reduce on the GPU; 0: stage the "  \
     "whole buffer through the host (docs/cuda.md)")                                          \
  XX(cuda_memops, "RR_CUDA_MEMOPS", 1, 0, 1,                                                  \
     "1: ring and chain collectives through CUDA IPC hand segments over with stream memory "  \
     "operations on the GPUs' streams, where the devices have them; 0: the host hands each "  \
     "segment over (docs/cuda.md)")                                                           \
  XX(cuda_staged_bytes, "RR_CUDA_STAGED_BYTES", 0, 0, 1LL << 40,                              \
     "ring and chain collectives on device buffers of ranks on one host of at most this "     \
     "many bytes are staged through pinned host memory, not CUDA IPC; 0: none (not yet "      \
     "measured on a GPU: docs/cuda.md, Small calls and fixed costs)")                         \
  XX(cuda_memops_bytes, "RR_CUDA_MEMOPS_BYTES", 0, 0, 1LL << 40,                              \
     "ring and chain collectives through CUDA IPC of fewer bytes than this keep the "         \
     "host's hand-off where stream memory operations would do; 0: every size takes them")     \
  XX(cuda_pull_bytes, "RR_CUDA_PULL_BYTES", 0, 0, 1LL << 40,                                  \
     "all_gather and all_reduce through CUDA IPC with stream memory operations of at least "  \
     "this many bytes read each all-gather segment straight from the sender's output (one "   \
     "copy, not two; docs/cuda.md); smaller ones keep the slots; 0: every size")              \
  XX(cuda_memops_mixed, "RR_CUDA_MEMOPS_MIXED", 0, 0, 1,                                      \
     "tests: 1 lets a group where some ranks are threads of one process take stream memory "  \
     "operations on its lanes between processes (it hangs once a lane carries more "          \
     "segments in a call than its slots: docs/cuda.md)")                                      \
  XX(ipc_epoch0, "RR_IPC_EPOCH0", 0, 0, 4294967295LL,                                         \
     "tests: the first value of the stream-memory flag words (near 2^32: their epochs wrap "  \
     "around soon)")                                                                          \
  XX(ib_gid_index, "RR_IB_GID_INDEX", -1, -1, 255,                                            \
     "RoCE: the GID table index to use (unset: the first RoCE v2 GID of the address family)")

#define RR__DBL_PARAMS(XX)                                       \
  XX(timeout_s, "RR_TIMEOUT", 1800.0, 0.001, 1e9,                \
     "seconds a call may take before it fails (default 30 min)") \
  XX(grace_s, "RR_GRACE_PERIOD", 30.0, 0.0, 1e6,                 \
     "seconds rr_spawn waits between SIGTERM and SIGKILL")

#define RR__STR_PARAMS(XX)                                                                       \
  XX(debug, "RR_DEBUG", "WARN", "log level: NONE, WARN, INFO or TRACE")                          \
  XX(debug_file, "RR_DEBUG_FILE", "", "log to this file (%h: host, %p: pid) instead of stderr")  \
  XX(debug_subsys, "RR_DEBUG_SUBSYS", "ALL", "log subsystems: INIT,COLL,NET,STORE; ^X excludes") \
  XX(algo, "RR_ALGO", "auto",                                                                    \
     "all-reduce algorithm: auto, ring, rd (recursive doubling) or star (via rank 0)")           \
  XX(socket_ifname, "RR_SOCKET_IFNAME", "",                                                      \
     "interfaces for data sockets: prefixes, ^ excludes, = exact (NCCL syntax)")                 \
  XX(hostid, "RR_HOSTID", "", "override the host identity used to find ranks on one host")       \
  XX(transport, "RR_TRANSPORT", "auto",                                                          \
     "auto picks per peer (shared memory on one host, InfiniBand between hosts where up); "      \
     "shm: as auto, but device buffers staged (never CUDA IPC); tcp forces sockets; "            \
     "ib forces verbs between every pair")                                                       \
  XX(ib_hca, "RR_IB_HCA", "",                                                                    \
     "InfiniBand devices/ports: prefixes, ^ excludes, = exact, dev:port (NCCL syntax)")          \
  XX(ib_library, "RR_IB_LIBRARY", "",                                                            \
     "the verbs library to dlopen (unset: libibverbs.so.1); tests point it at their fake")       \
  XX(job_token, "RR_JOB_TOKEN", "",                                                              \
     "secret shared by the ranks of one job (rrun sets it); other connections are refused")      \
  XX(trace, "RR_TRACE", "0",                                                                     \
     "1: one text line per rank per step on stderr; a file path: one JSON line per rank "        \
     "per step appended to it (ring/trace.c, tools/ringreduce-view)")

typedef struct rr__params {
#define RR__P_INT(f, env, def, lo, hi, doc) int64_t f;
#define RR__P_DBL(f, env, def, lo, hi, doc) double f;
#define RR__P_STR(f, env, def, doc) const char *f;
  RR__INT_PARAMS(RR__P_INT)
  RR__DBL_PARAMS(RR__P_DBL)
  RR__STR_PARAMS(RR__P_STR)
#undef RR__P_INT
#undef RR__P_DBL
#undef RR__P_STR
} rr__params;

/* The cached values. Never NULL; a malformed or out-of-range variable leaves its default in
 * place (and rr__params_check reports it). */
const rr__params *rr__params_get(void);
/* RR_OK, or RR_EENV with the last error naming the malformed variable (reported by init). */
int rr__params_check(void);
/* Parse "4M", "256K", "12" into bytes. Returns 0 on success, -1 if malformed. */
int rr__parse_size(const char *s, int64_t *out);

#endif /* RR__COMMON_PARAM_H_ */

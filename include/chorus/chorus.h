/* Chorus: collective communication for host memory and CUDA device memory, shaped like nccl.h.
 *
 * Every chorusX mirrors ncclX where it applies. Streams are Chorus's own ordered queues
 * (chorusStream_t); a NULL stream means "the call returns when the operation is complete".
 */
#ifndef CHORUS_CHORUS_H_
#define CHORUS_CHORUS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "chorus/version.h" /* CHORUS_MAJOR/MINOR/PATCH, CHORUS_VERSION_CODE, CHORUS_API */

#define CHORUS_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[CHORUS_UNIQUE_ID_BYTES];
} chorusUniqueId;

typedef struct chorusComm* chorusComm_t;
typedef struct chorusStream* chorusStream_t;

typedef enum {
  chorusSuccess = 0,
  chorusUnhandledCudaError = 1,
  chorusSystemError = 2,
  chorusInternalError = 3,
  chorusInvalidArgument = 4,
  chorusInvalidUsage = 5,
  chorusRemoteError = 6,
  chorusInProgress = 7,
  chorusTimeout = 8,
  chorusNumResults = 9
} chorusResult_t;

typedef enum {
  chorusInt8 = 0,
  chorusChar = 0,
  chorusUint8 = 1,
  chorusInt32 = 2,
  chorusInt = 2,
  chorusUint32 = 3,
  chorusInt64 = 4,
  chorusUint64 = 5,
  chorusFloat16 = 6,
  chorusHalf = 6,
  chorusFloat32 = 7,
  chorusFloat = 7,
  chorusFloat64 = 8,
  chorusDouble = 8,
  chorusBfloat16 = 9,
  chorusNumTypes = 10
} chorusDataType_t;

typedef enum {
  chorusSum = 0,
  chorusProd = 1,
  chorusMax = 2,
  chorusMin = 3,
  chorusAvg = 4,
  chorusNumOps = 5
} chorusRedOp_t;

/* Communicator configuration (chorusCommInitRankConfig). Initialise with CHORUS_CONFIG_INITIALIZER.
 */
typedef struct {
  size_t size;          /* sizeof(chorusConfig_t), set by the initializer */
  unsigned int magic;   /* set by the initializer */
  unsigned int version; /* set by the initializer */
  int blocking;         /* 1 (default): init returns when done; 0: returns chorusInProgress */
  int minChannels;      /* least channels a call uses where the algorithm splits over channels;
                           -1: CHORUS_MIN_NCHANNELS or 1. Rank 0's value holds for every rank */
  int maxChannels;      /* channels made (-1: CHORUS_MAX_NCHANNELS or 2); rank 0's holds */
  int cudaDevice;       /* -1: host memory communicator (CUDA backend: a device ordinal) */
  int timeoutMs; /* bound on waiting without progress: -1: from CHORUS_TIMEOUT (seconds, default
                    1800); 0: none; > 0: milliseconds (the torch backend passes its timeout) */
} chorusConfig_t;

#define CHORUS_CONFIG_MAGIC 0xc40c05u
#define CHORUS_CONFIG_INITIALIZER \
  { sizeof(chorusConfig_t), CHORUS_CONFIG_MAGIC, CHORUS_VERSION_CODE, 1, -1, -1, -1, -1 }

/* Version, errors */
CHORUS_API chorusResult_t chorusGetVersion(int* version);
CHORUS_API const char* chorusGetErrorString(chorusResult_t result);
/* The last error message of this thread (comm may be NULL) or of the communicator. Never NULL. */
CHORUS_API const char* chorusGetLastError(chorusComm_t comm);

/* Communicator creation */
CHORUS_API chorusResult_t chorusGetUniqueId(chorusUniqueId* uniqueId);
CHORUS_API chorusResult_t chorusCommInitRank(chorusComm_t* comm, int nranks, chorusUniqueId commId,
                                             int rank);
CHORUS_API chorusResult_t chorusCommInitRankConfig(chorusComm_t* comm, int nranks,
                                                   chorusUniqueId commId, int rank,
                                                   chorusConfig_t* config);
/* One process, ndev ranks: creates ndev communicators (ranks 0..ndev-1). Each is then driven
 * by its own thread, or all from one thread inside chorusGroupStart/End. devlist may be NULL. */
CHORUS_API chorusResult_t chorusCommInitAll(chorusComm_t* comms, int ndev, const int* devlist);
/* Launcher form: rank, size and the root's address from CHORUS_*, Open MPI, MPICH/Hydra (PMI_*),
 * Slurm or torchrun variables; see README "Launching". */
CHORUS_API chorusResult_t chorusCommInitFromEnv(chorusComm_t* comm);
/* The launcher's view for programs that run several ranks per process (threads): fills the id
 * from the environment (CHORUS_COMM_ID or MASTER_ADDR/MASTER_PORT, CHORUS_SECRET), and this
 * process's index and the process count. Process 0 also starts the bootstrap root there. Without
 * launcher variables: *procRank = 0, *nprocs = 1 and a fresh id (as chorusGetUniqueId). Process p
 * running T threads then calls chorusCommInitRank(&c, nprocs*T, id, p*T + t). */
CHORUS_API chorusResult_t chorusUniqueIdFromEnv(chorusUniqueId* uniqueId, int* procRank,
                                                int* nprocs);

#define CHORUS_SPLIT_NOCOLOR (-1)
CHORUS_API chorusResult_t chorusCommSplit(chorusComm_t comm, int color, int key,
                                          chorusComm_t* newcomm, chorusConfig_t* config);
/* Shrink (as ncclCommShrink, NCCL 2.27; docs/reliability.md "Shrink"): the ranks of `comm` that
 * call it build a new communicator without the ranks of excludeRanksList, nor any rank that died,
 * destroyed or aborted `comm`, nor one that does not join the agreement within
 * CHORUS_SHRINK_TIMEOUT seconds (default 30). The callers agree on that set over comm's own
 * channels (no listening socket), then init `newcomm`: its ranks are the survivors in comm's
 * rank order. Every caller passes the same list (it may be NULL with count 0: only dead ranks
 * go). A rank of the list that calls it too gets chorusSuccess and *newcomm = NULL; a rank the
 * others excluded gets chorusRemoteError and *newcomm = NULL. config NULL: comm's device and
 * timeout. CHORUS_SHRINK_DEFAULT: comm must have no operation in flight. CHORUS_SHRINK_ABORT
 * (implied when comm failed): comm's operations in flight are stopped first. comm stays valid:
 * destroy it (chorusCommAbort once it failed) when done. */
#define CHORUS_SHRINK_DEFAULT 0x00
#define CHORUS_SHRINK_ABORT 0x01
CHORUS_API chorusResult_t chorusCommShrink(chorusComm_t comm, const int* excludeRanksList,
                                           int excludeRanksCount, chorusComm_t* newcomm,
                                           chorusConfig_t* config, int shrinkFlags);
CHORUS_API chorusResult_t chorusCommFinalize(chorusComm_t comm);
CHORUS_API chorusResult_t chorusCommDestroy(chorusComm_t comm);
CHORUS_API chorusResult_t chorusCommAbort(chorusComm_t comm);
CHORUS_API chorusResult_t chorusCommGetAsyncError(chorusComm_t comm, chorusResult_t* asyncError);
/* Once comm failed: the rank of comm that caused it (a peer that died, failed or stopped making
 * progress, or this rank itself), as the error message names it; -1 while comm is healthy, or
 * when no single rank is to blame (e.g. ranks whose calls differ). The torch backend maps it to
 * a global rank for shrink after a failure. */
CHORUS_API chorusResult_t chorusCommGetFailedRank(chorusComm_t comm, int* rank);
CHORUS_API chorusResult_t chorusCommCount(const chorusComm_t comm, int* count);
/* Sets the bound on waiting without progress for the calls that start after it (timeoutMs as in
 * chorusConfig_t: 0 none, > 0 milliseconds; < 0 is an invalid argument). Call it between calls,
 * not while one of comm's calls is in flight on another thread. The torch backend uses it for
 * per-call timeouts and setTimeout. */
CHORUS_API chorusResult_t chorusCommSetTimeout(chorusComm_t comm, int timeoutMs);
CHORUS_API chorusResult_t chorusCommUserRank(const chorusComm_t comm, int* rank);
/* Chorus extension: prints this rank's status report for the communicator to stderr (the
 * operation in flight and its sequence number, what it waits for, the last operations completed;
 * docs/reliability.md "Status reports"). Safe to call from another thread while the
 * communicator is in a call. The same report comes on a timeout (CHORUS_TIMEOUT) and, for every
 * live communicator of the process, on CHORUS_STATUS_SIGNAL (default SIGUSR1). */
CHORUS_API chorusResult_t chorusCommPrintStatus(chorusComm_t comm);

/* Streams: ordered queues of operations run by a worker thread. */
CHORUS_API chorusResult_t chorusStreamCreate(chorusStream_t* stream);
CHORUS_API chorusResult_t chorusStreamSynchronize(chorusStream_t stream);
/* chorusSuccess when every operation enqueued so far is complete, chorusInProgress otherwise,
 * or the error of a failed operation. */
CHORUS_API chorusResult_t chorusStreamQuery(chorusStream_t stream);
CHORUS_API chorusResult_t chorusStreamDestroy(chorusStream_t stream);

/* CUDA backend (Chorus extension; docs/cuda.md). A communicator is bound to a device with
 * config.cudaDevice >= 0 (several ranks may share one GPU); its collectives then take device
 * buffers of that device only. chorusStreamCreateFromCuda wraps a cudaStream_t (passed as
 * void*; NULL is the legacy default stream): operations on it start after the work already
 * queued on that CUDA stream and are complete when the call returns. Without CUDA built in:
 * chorusInvalidUsage. Destroy the wrapper with chorusStreamDestroy (the CUDA stream stays). */
CHORUS_API chorusResult_t chorusStreamCreateFromCuda(chorusStream_t* stream, void* cudaStream);
CHORUS_API chorusResult_t chorusStreamGetCuda(chorusStream_t stream, void** cudaStream);
/* The device a communicator is bound to (as ncclCommCuDevice); -1 for a host communicator. */
CHORUS_API chorusResult_t chorusCommCuDevice(const chorusComm_t comm, int* device);

/* Collectives */
CHORUS_API chorusResult_t chorusAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                          chorusDataType_t datatype, chorusRedOp_t op,
                                          chorusComm_t comm, chorusStream_t stream);
CHORUS_API chorusResult_t chorusBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                          chorusDataType_t datatype, int root, chorusComm_t comm,
                                          chorusStream_t stream);
CHORUS_API chorusResult_t chorusReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       chorusDataType_t datatype, chorusRedOp_t op, int root,
                                       chorusComm_t comm, chorusStream_t stream);
/* sendcount elements per rank; recvbuff holds nranks*sendcount. In place: sendbuff ==
 * recvbuff + rank*sendcount. */
CHORUS_API chorusResult_t chorusAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                          chorusDataType_t datatype, chorusComm_t comm,
                                          chorusStream_t stream);
/* sendbuff holds nranks*recvcount. In place: recvbuff == sendbuff + rank*recvcount. */
CHORUS_API chorusResult_t chorusReduceScatter(const void* sendbuff, void* recvbuff,
                                              size_t recvcount, chorusDataType_t datatype,
                                              chorusRedOp_t op, chorusComm_t comm,
                                              chorusStream_t stream);
/* count elements to and from each peer; buffers hold nranks*count. */
CHORUS_API chorusResult_t chorusAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                         chorusDataType_t datatype, chorusComm_t comm,
                                         chorusStream_t stream);
/* count elements from each rank; recvbuff (root only) holds nranks*count. */
CHORUS_API chorusResult_t chorusGather(const void* sendbuff, void* recvbuff, size_t count,
                                       chorusDataType_t datatype, int root, chorusComm_t comm,
                                       chorusStream_t stream);
/* count elements to each rank; sendbuff (root only) holds nranks*count. */
CHORUS_API chorusResult_t chorusScatter(const void* sendbuff, void* recvbuff, size_t count,
                                        chorusDataType_t datatype, int root, chorusComm_t comm,
                                        chorusStream_t stream);
CHORUS_API chorusResult_t chorusSend(const void* sendbuff, size_t count, chorusDataType_t datatype,
                                     int peer, chorusComm_t comm, chorusStream_t stream);
CHORUS_API chorusResult_t chorusRecv(void* recvbuff, size_t count, chorusDataType_t datatype,
                                     int peer, chorusComm_t comm, chorusStream_t stream);

/* Receive from any source (Chorus extension, MPI_ANY_SOURCE's counterpart): count elements from
 * whichever peer's chorusSend message to this rank comes first; *source (if not NULL) is set to
 * that peer's rank once the receive completes (-1 until then: after chorusGroupEnd, or once the
 * stream has run it). The matched send's count and datatype size must equal this receive's.
 * Semantics: only messages of chorusSend match (never a collective's data); messages from one
 * source are received in the order it sent them; in a group, any-source receives match in the
 * order they were issued and a receive issued after one (named or not) waits until it has
 * matched, as MPI orders them; among several peers with a message waiting, the one after the
 * last matched peer is taken first (no sender starves). count must be > 0
 * (chorusInvalidArgument); host communicators only (chorusInvalidUsage on a device one). Like
 * every wait, it fails after the communicator's timeout. CHORUS_ANY_SOURCE is the peer value
 * it records (chorusRecv takes named peers only). */
#define CHORUS_ANY_SOURCE (-2)
CHORUS_API chorusResult_t chorusRecvAny(void* recvbuff, size_t count, chorusDataType_t datatype,
                                        int* source, chorusComm_t comm, chorusStream_t stream);

/* Registered memory (Chorus extension; docs/performance.md "Zero copy"), the counterpart of NCCL's
 * ncclMemAlloc and window registration. chorusMemAlloc returns `size` bytes (page aligned, zeroed)
 * of memory that the other processes of the node can map (an anonymous memory file: nothing
 * stays in /dev/shm after a crash); chorusMemFree releases it (deregister it first).
 * chorusCommRegister is collective: every rank of comm calls it, in the same order as its other
 * registrations, each with its own buffer (any memory; chorusMemAlloc memory is mapped by the
 * peers in other processes, other memory is reached directly only by ranks of the same
 * process). On return every rank knows every rank's region. An AllReduce or ReduceScatter whose
 * buffers are registered on every rank then runs zero-copy: each rank reduces its slice reading
 * every rank's input in place and writes the result straight into every rank's output (an
 * AllGather: each rank writes its block into every output). Calls on
 * unregistered buffers stay correct (every rank falls back together). chorusCommDeregister is
 * collective too, every rank passing the handle of the same registration. Neither may be called
 * while comm has operations queued on a stream. */
CHORUS_API chorusResult_t chorusMemAlloc(void** ptr, size_t size);
CHORUS_API chorusResult_t chorusMemFree(void* ptr);
CHORUS_API chorusResult_t chorusCommRegister(chorusComm_t comm, void* buff, size_t size,
                                             void** handle);
CHORUS_API chorusResult_t chorusCommDeregister(chorusComm_t comm, void* handle);

/* Groups: operations issued between Start and End run together at End. */
CHORUS_API chorusResult_t chorusGroupStart(void);
CHORUS_API chorusResult_t chorusGroupEnd(void);

/* Chorus extension: what the tuner picks for a collective ("allreduce", "broadcast", "reduce",
 * "allgather", "reducescatter", "alltoall", "gather", "scatter") of `count` elements (per rank,
 * as passed to the call) on this communicator, honouring CHORUS_ALGO / CHORUS_PROTO. */
typedef struct {
  /* Both strings belong to the library and live as long as it is loaded; never free them. */
  const char* algorithm; /* an algorithm's table name, as CHORUS_ALGO takes it (ring, tree, chain,
                            direct, naive, hier, oneshot, cma, twoshot, hd, zerocopy: the
                            "algorithms" line of chorusGetBuildInfo); "local" on a single rank */
  const char* protocol;  /* simple or ll; "none" on a single rank */
  int nchannels;
  double predictedUs; /* the model's time (a call of count 0: at most the fixed cost) */
} chorusChoice_t;
CHORUS_API chorusResult_t chorusTunerChoice(chorusComm_t comm, const char* collective, size_t count,
                                            chorusDataType_t datatype, chorusChoice_t* choice);
/* Chorus extension: the same choice (the tuner never tells an in-place call from an out-of-place
 * one: every rank must choose alike), with predictedUs for an in-place call: the out-of-place
 * time scaled by the in-place ratio chorus-tune measured on this node (an in-place call touches
 * one buffer instead of two). */
CHORUS_API chorusResult_t chorusTunerChoiceInPlace(chorusComm_t comm, const char* collective,
                                                   size_t count, chorusDataType_t datatype,
                                                   chorusChoice_t* choice);

/* Chorus extension: what this library holds, as "key=value" lines, for bug reports and
 * `python -m chorus`: version (major.minor.patch), cuda (yes or no: the CUDA backend is built),
 * algorithms (the names CHORUS_ALGO takes, comma separated), simd (the build of the reduce kernels
 * float32 sums run on this CPU: portable, avx2 or avx512), simd_widest (the widest build in use,
 * e.g. for bfloat16), simd_cpu (the builds this CPU can run). The kernel builds follow CHORUS_SIMD
 * as the collectives do. The string belongs to the library (made at the first call). */
CHORUS_API const char* chorusGetBuildInfo(void);

/* Size in bytes of one element (0 for an unknown type). */
CHORUS_API size_t chorusTypeSize(chorusDataType_t datatype);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_CHORUS_H_ */

/*
 * kiln's native runtime: what JIT-compiled CPU kernels call beyond the
 * ExecutionEngine (DESIGN.md, "The native side").
 *
 *   - a parallel-for over a small pool of worker threads (the wheel's MLIR
 *     has no OpenMP or async runtime);
 *   - kiln_sgemm_small: C = A B (+ C) for row-major f32 with few rows of A,
 *     where OpenBLAS packs all of B on every call (16 MiB for a 1024x4096
 *     weight at M = 8) and runs below memory speed.  Here B is streamed
 *     once per block of rows, in column panels split over the threads;
 *   - the packing slots of constant operands both GEMMs use (kiln_conv.c
 *     has the other: a constant A times activations, and convolutions).
 *
 * Built on first use by kiln/runtime/native.py (cc -O3 -march=native) and
 * loaded into the ExecutionEngine as a shared library.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "kiln_native.h"
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* ------------------------------------------------------------------ pool */

#define KILN_MAX_THREADS 64
/* Workers spin this long after a job before sleeping: kernels of one call
 * come back to back, and a condition-variable wake costs tens of µs.  After
 * the first KILN_PAUSE_NS they spin with sched_yield, so a runnable thread
 * of someone else (OpenBLAS's workers, another process) gets the core.
 * 50 µs of plain spinning, not 5: a worker in sched_yield took its syscall's
 * time to see the next kernel, and the gap between two calls (the caller's
 * Python) is past 5 µs (bench CNN 0.984x at batch 1 and 0.995x at 8, MLP
 * B=8 0.982x, the rest 0.99-1.00x; worker pairs). */
#define KILN_SPIN_NS 200000
#define KILN_PAUSE_NS 50000

/* A job is `parts` parts that any thread may claim.  job_word holds the
 * job's generation (high 32 bits) and its unclaimed parts [front, back)
 * (front in bits 0..15, back in bits 16..31: the part count at the start);
 * a part is claimed by a compare-and-swap on it, so a claim can only
 * succeed on the job the word names, and the caller claims whatever no
 * worker has taken: a worker that is not running (both cores busy
 * elsewhere) costs nothing, instead of a scheduler slice.  The caller
 * claims from the front, the workers from the back (claim): with two
 * threads each keeps its end of every job, so back-to-back kernels find
 * their half of the data in the core that wrote it (bench CNN B=1 0.981x,
 * MLP B=1 0.971x, transformer (4,128) 0.986x, the rest 0.999-1.012x;
 * worker pairs). */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cond = PTHREAD_COND_INITIALIZER;
static int pool_threads = 0; /* workers, not counting the caller */
static _Atomic uint64_t job_word = 0;
static atomic_llong job_done = 0; /* parts of the current job finished */
static uint32_t job_gen = 0;      /* the caller's copy (under pool_lock) */
static kiln_task_fn job_fn;
static void *job_ctx;
static int64_t job_n, job_parts;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* A part of job `gen` claimed, or -1 when that job has none left (or is
 * over): the first unclaimed one (bits 0..15 of job_word) or, from_back,
 * the last (bits 16..31 hold one past it).  The caller claims from the
 * front and the workers from the back, so each thread's parts are
 * neighbours (a run of tasks that share a weight block stays on one
 * thread) however finely the job is cut, and the two meet where their
 * speeds put them. */
static int64_t claim(uint32_t gen, int from_back) {
  uint64_t w = atomic_load_explicit(&job_word, memory_order_acquire);
  for (;;) {
    uint64_t front = w & 0xffff, back = (w >> 16) & 0xffff;
    if ((uint32_t)(w >> 32) != gen || front >= back) return -1;
    uint64_t next = from_back ? w - (1ull << 16) : w + 1;
    if (atomic_compare_exchange_weak_explicit(&job_word, &w, next, memory_order_acq_rel, memory_order_acquire))
      return (int64_t)(from_back ? back - 1 : front);
  }
}

/* Claim and run parts of job `gen` until none is left (from_back: claim). */
static void work(uint32_t gen, int from_back) {
  for (int64_t part; (part = claim(gen, from_back)) >= 0;) {
    int64_t lo = job_n * part / job_parts, hi = job_n * (part + 1) / job_parts;
    if (lo < hi) job_fn(job_ctx, lo, hi);
    atomic_fetch_add_explicit(&job_done, 1, memory_order_release);
  }
}

static uint32_t current_gen(void) { return (uint32_t)(atomic_load_explicit(&job_word, memory_order_acquire) >> 32); }

static __thread int worker_slot = 0;

/* Bound workers: worker i's thread and CPU (-1: not bound); free_cpu, the
 * allowed CPU none of them holds (-1 unless every worker is bound). */
static pthread_t worker_tid[KILN_MAX_THREADS];
static int worker_cpu[KILN_MAX_THREADS];
static int free_cpu = -1;

int kiln_worker_slot(void) { return worker_slot; }

/* Worker `slot` bound to the slot-th CPU this process may run on (modulo
 * their count), so the caller, unbound, has the others.  Unbound, a worker
 * woken after a pause (a condition-variable wake) was often placed on the
 * waker's CPU and stayed there: the two threads then shared one CPU, the
 * caller claimed every part, and the bench CNN at batch 1 ran at 55 µs a
 * call instead of 31 for seconds at a time (calls in bursts 50 ms apart; 10
 * of 24 bursts slow unbound, 0 of 24 bound; the machine's other slow spells,
 * in which one thread ran as fast as two, came bound too; so, in later runs,
 * did the caller on the worker's CPU: unshare_cpu below).  Only when the
 * pool is as big as the CPUs the process may use (threads = CPUs, the
 * default): a pool of fewer threads on a bigger machine leaves the
 * scheduler room to spread them, and several processes binding to the same
 * first CPUs would not.  Only when asked (pool_pin: kiln_pool_start's
 * `pin`, kiln.options' pin / KILN_PIN=1): a process that shares its cores
 * with others is better left to the scheduler.
 * bind_attr sets `attr` so (worker `slot` of a pool of `threads`); 0 when
 * the worker is not to be bound. */
static int pool_pin = 0;
static int bind_attr(pthread_attr_t *attr, int slot, int threads) {
  cpu_set_t allowed, one;
  if (!pool_pin || sched_getaffinity(0, sizeof allowed, &allowed) != 0 ||
      threads < CPU_COUNT(&allowed))
    return 0;
  int want = slot % CPU_COUNT(&allowed);
  for (int c = 0, i = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &allowed) && i++ == want) {
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      if (pthread_attr_setaffinity_np(attr, sizeof one, &one) != 0) return 0;
      worker_cpu[slot] = c;
      return 1;
    }
  return 0;
}

/* The caller, unbound, can still land on a worker's CPU (woken there after
 * a sleep, and kept there: the balancer does not pull a running thread off
 * a CPU whose other thread is pinned).  The two then share that CPU, the
 * caller claims every part, and the bench CNN at batch 1 ran at 54 µs a
 * call instead of 31 for bursts at a time.  So a job that finds the caller
 * on worker i's CPU moves worker i to the CPU no worker holds (free_cpu)
 * and that CPU becomes the free one: one sched_getcpu a job, a
 * pthread_setaffinity_np when they meet.  (The machine's other slow state,
 * both threads on their own CPUs yet each at half speed, as one alone,
 * is the host's: a 2-part job of spinning took 60 us there on one thread
 * and on two.)  Under pool_lock. */
static void unshare_cpu(void) {
  if (free_cpu < 0) return;
  int c = sched_getcpu();
  if (c < 0 || c == free_cpu) return;
  for (int i = 1; i <= pool_threads; i++)
    if (worker_cpu[i] == c) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(free_cpu, &one);
      if (pthread_setaffinity_np(worker_tid[i], sizeof one, &one) == 0) worker_cpu[i] = free_cpu, free_cpu = c;
      return;
    }
}

/* Set (under pool_lock, with no job running) while kiln_pool_start stops
 * the workers: a worker woken by the empty job that follows exits. */
static atomic_int pool_stopping = 0;

static void *worker(void *arg) {
  worker_slot = (int)(intptr_t)arg;
  uint32_t seen = 0;
  for (;;) {
    int64_t start = now_ns();
    for (;;) {
      if (current_gen() != seen) break;
      int64_t waited = now_ns() - start;
      if (waited > KILN_SPIN_NS) {
        pthread_mutex_lock(&wake_lock);
        while (current_gen() == seen) pthread_cond_wait(&wake_cond, &wake_lock);
        pthread_mutex_unlock(&wake_lock);
        break;
      }
      if (waited > KILN_PAUSE_NS)
        sched_yield();
      else
        cpu_relax();
    }
    seen = current_gen();
    if (atomic_load_explicit(&pool_stopping, memory_order_acquire)) return NULL;
    work(seen, 1);
  }
  return NULL;
}

/* Stop every worker and wait for it to exit; under pool_lock, so no job
 * is running (a caller that finds the lock taken runs its job itself).
 * Each worker sees the empty job published here after pool_stopping. */
static void pool_stop_locked(void) {
  if (pool_threads == 0) return;
  atomic_store_explicit(&pool_stopping, 1, memory_order_release);
  uint32_t gen = ++job_gen;
  atomic_store_explicit(&job_word, (uint64_t)gen << 32, memory_order_release); /* no parts */
  pthread_mutex_lock(&wake_lock);
  pthread_cond_broadcast(&wake_cond);
  pthread_mutex_unlock(&wake_lock);
  for (int i = 1; i <= pool_threads; i++) pthread_join(worker_tid[i], NULL);
  atomic_store_explicit(&pool_stopping, 0, memory_order_release);
  pool_threads = 0;
  free_cpu = -1;
}

/* Start workers until the pool has `threads` threads (the caller is the
 * last one); under pool_lock. */
static void pool_grow_locked(int threads) {
  for (int i = pool_threads + 1; i < threads; i++) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    worker_cpu[i] = -1;
    int bound = bind_attr(&attr, i, threads);
    int failed = pthread_create(&t, &attr, worker, (void *)(intptr_t)i) != 0;
    pthread_attr_destroy(&attr);
    if (failed && bound) worker_cpu[i] = -1, failed = pthread_create(&t, NULL, worker, (void *)(intptr_t)i) != 0;
    if (failed) break;
    worker_tid[i] = t; /* joinable: kiln_pool_start joins it when it resizes the pool */
    pool_threads = i;
  }
  /* One thread per allowed CPU, every worker bound to one: the CPU none
   * holds is the caller's (unshare_cpu; after a swap not the first). */
  cpu_set_t allowed;
  int all_bound = pool_threads > 0;
  for (int i = 1; i <= pool_threads; i++) all_bound &= worker_cpu[i] >= 0;
  free_cpu = -1;
  if (all_bound && sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) == pool_threads + 1)
    for (int c = 0; c < CPU_SETSIZE && free_cpu < 0; c++) {
      int held = !CPU_ISSET(c, &allowed);
      for (int i = 1; i <= pool_threads && !held; i++) held = worker_cpu[i] == c;
      if (!held) free_cpu = c;
    }
}

/* The pool with exactly `threads` threads (1 .. KILN_MAX_THREADS, the
 * caller included), its workers bound to CPUs when `pin` (see bind_attr);
 * returns the threads it has.  A pool of another size or binding is
 * stopped and started again: kiln.options' threads / pin set once the
 * library is loaded.  A kernel running in another thread meanwhile runs
 * its jobs alone; one sized by kiln_pool_threads() before the resize
 * would index its per-slot buffers past their end with more workers, so
 * resize while no model runs (kiln.compile does it before compiling). */
int kiln_pool_start(int threads, int pin) {
  pthread_mutex_lock(&pool_lock);
  if (threads > KILN_MAX_THREADS) threads = KILN_MAX_THREADS;
  if (threads < 1) threads = 1;
  if (threads != pool_threads + 1 || (pin != 0) != pool_pin) {
    pool_stop_locked();
    pool_pin = pin != 0;
    pool_grow_locked(threads);
  }
  int n = pool_threads + 1;
  pthread_mutex_unlock(&pool_lock);
  return n;
}

/* Start `threads - 1` workers (the caller is the last thread); idempotent,
 * and never shrinks the pool (the C harness's entry: kiln_pool_start sets
 * an exact size). */
int kiln_pool_init(int threads) {
  pthread_mutex_lock(&pool_lock);
  if (threads > KILN_MAX_THREADS) threads = KILN_MAX_THREADS;
  pool_grow_locked(threads);
  int n = pool_threads + 1;
  pthread_mutex_unlock(&pool_lock);
  return n;
}

/* How many workers are bound to a CPU (0 unless the pool was started with pin). */
int kiln_pool_pinned(void) {
  pthread_mutex_lock(&pool_lock);
  int n = 0;
  for (int i = 1; i <= pool_threads; i++) n += worker_cpu[i] >= 0;
  pthread_mutex_unlock(&pool_lock);
  return n;
}

int kiln_pool_threads(void) { return pool_threads + 1; }

/* Floats per vector this build computes in (16: AVX-512, 8: AVX2). */
int kiln_vector_width(void) { return KILN_VW; }

/* Ranges per thread that kiln_parts hands out: each thread claims ranges
 * until none is left, so a thread slowed down (another tenant on its core,
 * a spell of cache misses) leaves the rest to the others instead of
 * holding up the call with its fixed half. */
#define KILN_PARTS_PER_THREAD 4

int64_t kiln_parts(int64_t tasks, int64_t threads) {
  int64_t want = threads * KILN_PARTS_PER_THREAD;
  return tasks < want ? tasks : want;
}

/* fn(ctx, lo, hi) over [0, n) in `parts` ranges, on the pool and the caller;
 * each thread runs ranges until none is left (parts > threads balances the
 * load, see kiln_parts; a task that takes a buffer per range needs parts of
 * them).  A caller that finds the pool busy (another thread's kernel) runs
 * it all. */
void kiln_parallel_for(kiln_task_fn fn, void *ctx, int64_t n, int64_t parts) {
  if (parts > 0xffff) parts = 0xffff; /* job_word's field */
  if (parts <= 1 || n <= 1 || pool_threads == 0 || pthread_mutex_trylock(&pool_lock) != 0) {
    fn(ctx, 0, n);
    return;
  }
  unshare_cpu();
  job_fn = fn;
  job_ctx = ctx;
  job_n = n;
  job_parts = parts;
  atomic_store_explicit(&job_done, 0, memory_order_relaxed);
  uint32_t gen = ++job_gen;
  atomic_store_explicit(&job_word, ((uint64_t)gen << 32) | ((uint64_t)parts << 16), memory_order_release);
  pthread_mutex_lock(&wake_lock);
  pthread_cond_broadcast(&wake_cond);
  pthread_mutex_unlock(&wake_lock);
  work(gen, 0);
  /* Only parts a worker claimed and is still running are waited for. */
  while (atomic_load_explicit(&job_done, memory_order_acquire) < parts) cpu_relax();
  pthread_mutex_unlock(&pool_lock);
}

/* ------------------------------------------------------------ small GEMM */

#include <stdlib.h>
#include <sys/mman.h>

/* Register block: MR rows of A times NR = two vectors of B's columns (see
 * kiln_native.h). */
#define SV KILN_VW
#define MR KILN_MR
#define NR KILN_NR /* columns of B per panel: two vectors */
/* The packed panel is streamed PF_ROWS rows ahead, both cache lines of a
 * 32-float row (the hardware prefetcher fell behind several rows of FMAs). */
#define PF_ROWS 64

/* A product whose B is a weight (a constant of the JIT module, or an
 * argument the runtime binds to the same buffer every call) gets a slot: a
 * mutable i64 global of that module, 0 until the first call packs B into
 * panels of NR columns, K rows each contiguous (one sequential stream per
 * panel instead of K rows a page apart) and stores the packed copy there.
 * A slot holds a list: one kernel compiled once for identical layers is
 * called with each layer's weight, and packs each on its first use.
 * The module's kiln_release_packed() frees every packed copy of its slots
 * (the runtime calls it when the model dies). */
typedef struct packed {
  const float *src;
  int64_t K, N, ldb;
  int64_t kind;  /* KILN_PACK_B (this file's small GEMM) or KILN_PACK_A (kiln_conv.c) */
  int64_t bytes; /* of data[] */
  struct packed *next;
  int64_t pad;   /* data[] at 64 bytes, a cache line */
  float data[];
} packed_t;

/* The most matrices one slot packs: more layers than any model has; past it
 * (a slot handed ever new pointers) the calls take the unpacked path. */
#define SLOT_ENTRIES 1024

static atomic_llong packed_total = 0;

#define HUGE_PAGE (2 << 20)

/* Switches kiln.options handed over (kiln_set_switch), before any kernel
 * ran: the option wins over the environment, which the C harness
 * (bench/native_check.py) still uses. */
#define KILN_MAX_SWITCHES 16
static struct {
  char name[32];
  int on;
} set_switches[KILN_MAX_SWITCHES];
static int n_set_switches = 0;

/* Switch `name` on or off for every kiln_switch_on that has not read it
 * yet; 0, or -1 when the table is full or the name too long. */
int kiln_set_switch(const char *name, int on) {
  int i = 0;
  while (i < n_set_switches && strcmp(set_switches[i].name, name) != 0) i++;
  if (i == KILN_MAX_SWITCHES || strlen(name) >= sizeof set_switches[i].name) return -1;
  if (i == n_set_switches) strcpy(set_switches[n_set_switches++].name, name);
  set_switches[i].on = on != 0;
  return 0;
}

/* See kiln_native.h. */
int kiln_switch_on(const char *name, int *cached) {
  if (*cached < 0) {
    for (int i = 0; i < n_set_switches && *cached < 0; i++)
      if (strcmp(set_switches[i].name, name) == 0) *cached = set_switches[i].on;
    if (*cached < 0) {
      const char *v = getenv(name);
      *cached = !(v && v[0] == '0');
    }
  }
  return *cached;
}

/* The allocations kiln_alloc made as mappings of their own, for kiln_free. */
typedef struct huge_map {
  void *p;
  size_t size;
  struct huge_map *next;
} huge_map;
static pthread_mutex_t huge_lock = PTHREAD_MUTEX_INITIALIZER;
static huge_map *huge_maps = NULL;

/* `bytes` aligned to 64; from HUGE_PAGE (2 MiB) up, in 2 MiB pages
 * where the kernel gives them (transparent huge pages in madvise mode, as
 * here, back nothing unasked): a packed 1024 x 4096 weight streamed per
 * call otherwise crosses 4096 small pages, a TLB miss every 64 lines.
 * Those are fresh mappings, 2 MiB-aligned and advised before their first
 * touch: memory malloc reused (freed by an earlier model, its small pages
 * already faulted in) took the advice too late, and ResNet-50 ran at its
 * small-page speed (44.5 ms instead of 36.8) whenever it came after other
 * models in one process.  KILN_HUGEPAGES=0 turns it off.  Release with
 * kiln_free. */
void *kiln_alloc(size_t bytes) {
  static int huge = -1;
  if (!kiln_switch_on("KILN_HUGEPAGES", &huge) || bytes < HUGE_PAGE) return aligned_alloc(64, (bytes + 63) / 64 * 64);
  size_t size = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
  huge_map *node = malloc(sizeof *node);
  char *m = node ? mmap(NULL, size + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                 : MAP_FAILED;
  if (m == MAP_FAILED) {
    free(node);
    return aligned_alloc(HUGE_PAGE, size);
  }
  char *p = (char *)(((uintptr_t)m + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE);
  if (p > m) munmap(m, (size_t)(p - m));
  if (p + size < m + size + HUGE_PAGE) munmap(p + size, (size_t)(m + size + HUGE_PAGE - (p + size)));
#ifdef MADV_HUGEPAGE
  madvise(p, size, MADV_HUGEPAGE); /* advice only: a refusal costs nothing */
#endif
  node->p = p, node->size = size;
  pthread_mutex_lock(&huge_lock);
  node->next = huge_maps, huge_maps = node;
  pthread_mutex_unlock(&huge_lock);
  return p;
}

/* Release what kiln_alloc returned (NULL: nothing). */
void kiln_free(void *p) {
  if (p == NULL) return;
  pthread_mutex_lock(&huge_lock);
  for (huge_map **at = &huge_maps; *at != NULL; at = &(*at)->next)
    if ((*at)->p == p) {
      huge_map *node = *at;
      *at = node->next;
      pthread_mutex_unlock(&huge_lock);
      munmap(p, node->size);
      free(node);
      return;
    }
  pthread_mutex_unlock(&huge_lock);
  free(p);
}

int64_t kiln_packed_bytes(void) { return atomic_load(&packed_total); }

void kiln_free_packed(int64_t p) {
  for (packed_t *pb = (packed_t *)p, *next; pb != NULL; pb = next) {
    next = pb->next;
    atomic_fetch_sub(&packed_total, pb->bytes);
    kiln_free(pb);
  }
}

/* A scratch buffer of at least `bytes` for the calling thread, kept for its
 * next call (freed when the thread exits); NULL when memory ran out.  Fresh
 * buffers of a MiB per call were mmapped, faulted in and unmapped every
 * time, and each unmap interrupted the other core (a TLB shootdown): 2x
 * slower on two threads for a 100 µs convolution.  One buffer per thread:
 * a kernel uses it for one call and nests no other user. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
typedef struct {
  size_t bytes;
  float *data;
} scratch_t;

static void scratch_free(void *p) {
  scratch_t *s = p;
  for (int i = 0; i < KILN_SCRATCHES; i++) kiln_free(s[i].data);
  free(s);
}

static void scratch_init(void) { pthread_key_create(&scratch_key, scratch_free); }

float *kiln_thread_buffer(int which, size_t bytes) {
  pthread_once(&scratch_once, scratch_init);
  scratch_t *all = pthread_getspecific(scratch_key);
  if (all == NULL) {
    if ((all = calloc(KILN_SCRATCHES, sizeof *all)) == NULL || pthread_setspecific(scratch_key, all) != 0) {
      free(all);
      return NULL;
    }
  }
  scratch_t *s = &all[which];
  if (s->bytes < bytes) {
    kiln_free(s->data);
    s->bytes = 0;
    if ((s->data = kiln_alloc(bytes)) == NULL) return NULL;
    s->bytes = bytes;
  }
  return s->data;
}

float *kiln_thread_scratch(size_t bytes) { return kiln_thread_buffer(0, bytes); }

/* The slot's packed copy of `src` (rows x cols, leading dim ld) in layout
 * `kind`, packing it on its first call; NULL when memory ran out or the slot
 * is full (callers then take an unpacked path). */
static const float *slot_find(packed_t *pb, int64_t kind, const float *src, int64_t rows, int64_t cols, int64_t ld,
                              int *entries) {
  for (*entries = 0; pb != NULL; pb = pb->next, ++*entries)
    if (pb->src == src && pb->K == rows && pb->N == cols && pb->ldb == ld && pb->kind == kind) return pb->data;
  return NULL;
}

const float *kiln_slot_packed(int64_t slot, int64_t kind, const float *src, int64_t rows, int64_t cols, int64_t ld,
                              int64_t floats, kiln_pack_fn pack) {
  if (slot == 0) return NULL;
  _Atomic(packed_t *) *s = (_Atomic(packed_t *) *)slot;
  packed_t *head = atomic_load_explicit(s, memory_order_acquire);
  int entries;
  const float *found = slot_find(head, kind, src, rows, cols, ld, &entries);
  if (found != NULL || entries >= SLOT_ENTRIES) return found;
  size_t bytes = sizeof(packed_t) + (size_t)floats * sizeof(float);
  packed_t *fresh = kiln_alloc(bytes);
  if (fresh == NULL) return NULL;
  fresh->src = src;
  fresh->K = rows;
  fresh->N = cols;
  fresh->ldb = ld;
  fresh->kind = kind;
  fresh->bytes = floats * (int64_t)sizeof(float);
  pack(fresh->data, src, rows, cols, ld);
  atomic_fetch_add(&packed_total, fresh->bytes);
  fresh->next = head;
  while (!atomic_compare_exchange_strong(s, &head, fresh)) {
    /* another thread pushed first: its entry may be this matrix */
    if ((found = slot_find(head, kind, src, rows, cols, ld, &entries)) != NULL) {
      fresh->next = NULL;
      kiln_free_packed((int64_t)fresh);
      return found;
    }
    fresh->next = head;
  }
  return fresh->data;
}

/* B (K x N) as panels of NR columns, K rows each contiguous. */
static void pack_b_panels(float *dst, const float *B, int64_t K, int64_t N, int64_t ldb) {
  pack_panels(dst, B, K, N, NR, ldb, 1);
}

/* B given as B^T ([N, K], rows ldb apart) into the same panels. */
static void pack_bt_panels(float *dst, const float *B, int64_t K, int64_t N, int64_t ldb) {
  pack_panels(dst, B, K, N, NR, 1, ldb);
}

static const float *packed_for(int64_t slot, const float *B, int64_t K, int64_t N, int64_t ldb, int trans) {
  return kiln_slot_packed(slot, trans ? KILN_PACK_BT : KILN_PACK_B, B, K, N, ldb, (N + NR - 1) / NR * NR * K,
                          trans ? pack_bt_panels : pack_b_panels);
}

typedef struct {
  int64_t M, N, K, lda, ldb, ldc;
  const float *A, *B;
  const float *P; /* packed B, or NULL */
  float *C;
  int accumulate;
  /* The epilogue applied to each tile before it is stored (kiln_epilogue_vec):
   * bias [N] or NULL, act KILN_ACT_*, residual R (rows ldr apart) or NULL. */
  const float *bias;
  int act;
  const float *R;
  int64_t ldr;
} gemm_args;

static inline int has_epilogue(const gemm_args *g) { return g->bias || g->act || g->R; }

/* C[m0 .. m0 + mr, panel] (nr <= NR columns of it) over all K, from a panel
 * whose row k starts at b + k * bstride; mr is a compile-time constant at
 * every call site, so the loops over it unroll and acc stays in registers.
 * With `prefetch` (0 where the panel is already in cache: PF_FIRST_ROWS)
 * the panel is prefetched ahead and pf_lines of the next one (pfn) spread
 * over the K steps. */
static inline __attribute__((always_inline)) void micro(const gemm_args *g, int mr, int64_t m0, int64_t n0,
                                                         const float *b, int64_t bstride, float *c, int64_t nr,
                                                         const float *pfn, int64_t pf_lines, int prefetch) {
  const char *pf = (const char *)pfn;
  int64_t pf_acc = 0;
  kiln_vec acc[MR][2];
  for (int m = 0; m < mr; m++) acc[m][0] = acc[m][1] = (kiln_vec){0};
  const float *A = g->A + m0 * g->lda;
  const float *rt = g->R ? g->R + m0 * g->ldr + n0 : NULL; /* the tile's residual, or NULL */
  /* The tile's rows of C (for writing) and of the residual (into L2),
   * asked for now so they are there when the tile is stored after the K
   * loop: in a model C and R are arena memory an earlier kernel left in L3,
   * and each tile stalled on their lines.  One thread, C and R rotating
   * through 16 huge-page copies: 256 x 256 x 768 with a cold C 987-998 ->
   * 905-933 us (a hot C 893-904), with a cold C and residual 1053-1063 ->
   * 963-970; 256 x 256 x 256 308-356 -> 296-317; 256 x 1024 x 256
   * 1185-1190 -> 1163-1168.  R into L1 (prefetcht0) was slower (978 against
   * 951 with a hot C), the next tile's rows no better. */
  for (int m = 0; m < mr; m++)
    for (int64_t j = 0; j < NR; j += 64 / (int64_t)sizeof(float)) {
      __builtin_prefetch(c + m * g->ldc + j, 1);
      if (rt) __builtin_prefetch(rt + m * g->ldr + j, 0, 2);
    }
  for (int64_t k = 0; k < g->K; k++) {
    const float *bk = b + k * bstride;
    /* With several rows of A the FMAs fall behind the hardware prefetcher
     * (M = 8 at 32 rows ahead, one line: 0.89 ms, both lines 0.64, 64 rows
     * ahead 0.60); one row only streams, and the extra requests slowed it. */
    if (prefetch && mr > 1) {
      __builtin_prefetch(bk + PF_ROWS * bstride);
      if (NR * sizeof(float) > 64) __builtin_prefetch(bk + PF_ROWS * bstride + 64 / sizeof(float));
    }
    if (prefetch && mr > 1 && pf) {
      pf_acc += pf_lines;
      if (pf_acc >= g->K) {
        __builtin_prefetch(pf, 0, 2);
        pf += 64;
        pf_acc -= g->K;
      }
    }
    kiln_vec b0 = kiln_loadu(bk), b1 = kiln_loadu(bk + SV);
    /* The tiles of fewer rows keep the two vectors in registers: gcc folded
     * both loads into each of their FMAs (kiln_pinned).  Not the whole
     * tile, where gcc keeps them anyway and the pin cost 64-row products
     * 1.07x (AVX2, two threads, same library otherwise, alternating). */
    if (mr < MR) b0 = kiln_pinned(b0), b1 = kiln_pinned(b1);
    for (int m = 0; m < mr; m++) {
      float a = A[m * g->lda + k];
      acc[m][0] += a * b0;
      acc[m][1] += a * b1;
    }
  }
  /* A whole panel is stored from the registers, in a loop of its own (through
   * a buffer and a loop over its columns: the transformer block's products
   * at (1, 32) 1.01-1.04x as long, same library, alternating), after the
   * epilogue (bias, activation, residual) while the tile is still there: a
   * separate pass over C had cost each product a handoff to the pool and a
   * sweep of C (the block at (1, 32) 0.96x with it here, worker pairs). */
  const int epi = has_epilogue(g);
  const float *bias = g->bias ? g->bias + n0 : NULL;
  if (nr == NR) {
    for (int m = 0; m < mr; m++) {
      float *cm = c + m * g->ldc;
      kiln_vec c0 = acc[m][0], c1 = acc[m][1];
      if (g->accumulate) {
        c0 += kiln_loadu(cm);
        c1 += kiln_loadu(cm + SV);
      }
      if (epi) {
        const float *r = rt ? rt + m * g->ldr : NULL;
        c0 = kiln_epilogue_vec(c0, bias, g->act, r);
        c1 = kiln_epilogue_vec(c1, bias ? bias + SV : NULL, g->act, r ? r + SV : NULL);
      }
      __builtin_memcpy(cm, &c0, sizeof c0);
      __builtin_memcpy(cm + SV, &c1, sizeof c1);
    }
    return;
  }
  for (int m = 0; m < mr; m++) {
    float *cm = c + m * g->ldc;
    float out[NR];
    __builtin_memcpy(out, &acc[m][0], sizeof acc[m][0]);
    __builtin_memcpy(out + SV, &acc[m][1], sizeof acc[m][1]);
    if (g->accumulate)
      for (int64_t j = 0; j < nr; j++) out[j] += cm[j];
    if (epi) {
      const float *r = rt ? rt + m * g->ldr : NULL;
      for (int64_t j = 0; j < nr; j++)
        out[j] = kiln_epilogue_float(out[j], bias ? bias + j : NULL, g->act, r ? r + j : NULL);
    }
    for (int64_t j = 0; j < nr; j++) cm[j] = out[j];
  }
}

/* From this many rows of A only a panel's first row block prefetches (its
 * panel, and all of the next panel's lines) while the others find the
 * panel in L1 or L2.  With AVX2 a step of the loop is 12 FMAs of 8 lanes,
 * and the prefetches' bookkeeping beside them cost a third of the kernel
 * where B stays in cache: every block prefetching against none (one
 * thread, alternating, same library otherwise) 2048 x 256 x 1024 / 512 x
 * 1024 x 256 / 64 x 1024 x 4096 1 : 0.78 / 0.84 / 0.95; first block only,
 * two threads, weights from memory: 32 rows 0.88-0.91x, 64 0.90-0.96x.
 * Products that stream their weight with few row blocks need every
 * block's share (8 and 9 rows, first block only: 1.05-1.15x).  AVX-512's
 * step is 16 FMAs of 16 lanes: every block keeps them (the shares in panel()
 * were measured there). */
#if KILN_VW == 8
#define PF_FIRST_ROWS (4 * MR)
#else
#define PF_FIRST_ROWS INT64_MAX
#endif

/* All row blocks of panel q.  `next` (a packed panel this thread takes
 * next, or NULL) is prefetched while this one is computed, each row block
 * a share of its lines spread over its K steps: otherwise the first row
 * block of each panel waits on memory while the later ones find it in L2.
 * Same library, alternating, two threads, the bench MLP's two products:
 * M = 9 0.76-0.84x, 16 0.90x, 32 0.89-0.97x, 64 no change. */
static void panel(const gemm_args *g, int64_t q, const float *b, int64_t bstride, int64_t nr, const float *next) {
  /* Lines of 64 bytes (16 floats): the panel's, and each row block's share. */
  int64_t blocks = (g->M + MR - 1) / MR, lines = (g->K * NR * 4 + 63) / 64, n0 = q * NR;
  int first_only = g->M >= PF_FIRST_ROWS;
  int64_t per = first_only ? lines : (lines + blocks - 1) / blocks;
  if (blocks < 2) next = NULL;
  int64_t m0 = 0;
#define MICRO(mr, pf) micro(g, mr, m0, n0, b, bstride, g->C + m0 * g->ldc + n0, nr, \
                            next ? next + m0 / MR * per * (64 / 4) : NULL, per, pf)
  if (first_only) { /* M >= PF_FIRST_ROWS: a whole first block */
    MICRO(MR, 1);
    m0 += MR;
    for (; m0 + MR <= g->M; m0 += MR) MICRO(MR, 0);
  }
  for (; m0 + MR <= g->M; m0 += MR) MICRO(MR, 1);
  int pf = !first_only;
  switch (g->M - m0) {
#if MR > 7
    case 7: MICRO(7, pf); break;
    case 6: MICRO(6, pf); break;
#endif
    case 5: MICRO(5, pf); break;
    case 4: MICRO(4, pf); break;
    case 3: MICRO(3, pf); break;
    case 2: MICRO(2, pf); break;
    case 1: MICRO(1, pf); break;
    default: break;
  }
#undef MICRO
}

/* Panels [lo, hi) of NR columns, every row. */
/* With AVX2, a product of one row (M = 1: batch-1 inference) runs over
 * GEMV_PANELS packed panels at once: that many streams from memory in
 * flight on each core, and as many independent sums per column vector.
 * Against one panel at a time (same library, alternating, two threads,
 * three 16 MB weights in turn so each comes from memory): 1 x 1024 x 4096
 * 0.79-0.86x, 1 x 4096 x 1024 0.75-0.88x, the transformer's 1 x 256 x
 * 768..1024 0.82-0.87x; 2 panels at once 0.82-0.93x, 3 0.83-0.90x.  Not
 * measured on AVX-512, whose build keeps one panel at a time. */
#if KILN_VW == 8
#define GEMV_PANELS 4
static void gemv_panels(const gemm_args *g, int64_t q) {
  const float *b = g->P + q * g->K * NR;
  kiln_vec c[GEMV_PANELS][2];
  for (int p = 0; p < GEMV_PANELS; p++) c[p][0] = c[p][1] = (kiln_vec){0};
  for (int64_t k = 0; k < g->K; k++) {
    float x = g->A[k];
    for (int p = 0; p < GEMV_PANELS; p++) {
      c[p][0] += x * kiln_loadu(b + (p * g->K + k) * NR);
      c[p][1] += x * kiln_loadu(b + (p * g->K + k) * NR + SV);
    }
  }
  float *cq = g->C + q * NR;
  for (int p = 0; p < GEMV_PANELS; p++) {
    if (g->accumulate) c[p][0] += kiln_loadu(cq + p * NR), c[p][1] += kiln_loadu(cq + p * NR + SV);
    if (has_epilogue(g)) {
      int64_t n0 = (q + p) * NR;
      const float *bias = g->bias ? g->bias + n0 : NULL, *r = g->R ? g->R + n0 : NULL;
      c[p][0] = kiln_epilogue_vec(c[p][0], bias, g->act, r);
      c[p][1] = kiln_epilogue_vec(c[p][1], bias ? bias + SV : NULL, g->act, r ? r + SV : NULL);
    }
    __builtin_memcpy(cq + p * NR, &c[p][0], sizeof c[p][0]);
    __builtin_memcpy(cq + p * NR + SV, &c[p][1], sizeof c[p][1]);
  }
}
#endif

static void panel_range(const gemm_args *g, int64_t lo, int64_t hi) {
  float tail[64 * NR]; /* the last, partial panel of an unpacked B: copied so micro reads NR columns */
#ifdef GEMV_PANELS
  if (g->M == 1 && g->P) /* whole panels in groups; the rest (and a partial panel) below */
    for (; lo + GEMV_PANELS <= hi && (lo + GEMV_PANELS) * NR <= g->N; lo += GEMV_PANELS) gemv_panels(g, lo);
#endif
  for (int64_t q = lo; q < hi; q++) {
    int64_t n0 = q * NR, nr = g->N - n0 < NR ? g->N - n0 : NR;
    if (g->P) {
      const float *next = q + 1 < hi ? g->P + (q + 1) * g->K * NR : NULL;
      panel(g, q, g->P + q * g->K * NR, NR, nr, next);
    } else if (nr == NR) {
      panel(g, q, g->B + n0, g->ldb, nr, NULL);
    } else {
      for (int64_t k0 = 0; k0 < g->K; k0 += 64) { /* a partial panel, K in chunks of 64 rows */
        int64_t kc = g->K - k0 < 64 ? g->K - k0 : 64;
        for (int64_t k = 0; k < kc; k++)
          for (int64_t j = 0; j < NR; j++) tail[k * NR + j] = j < nr ? g->B[(k0 + k) * g->ldb + n0 + j] : 0.0f;
        gemm_args part = *g;
        part.K = kc;
        part.A = g->A + k0;
        part.accumulate = g->accumulate || k0 > 0;
        if (k0 + kc < g->K) part.bias = NULL, part.act = KILN_ACT_NONE, part.R = NULL; /* the last chunk's */
        panel(&part, q, tail, NR, nr, NULL);
      }
    }
  }
}

/* A block of A of at most this many bytes is used by every panel of a part
 * while it stays in L2. */
#define GEMM_A_BLOCK_BYTES (256 << 10)

/* Panels [lo, hi) of NR columns, in blocks of rows: each panel had streamed
 * all of A (4096 x 256 is 4 MiB, from L3 once per panel); a block of A now
 * stays in L2 while the part's panels pass over it (the packed panels come
 * again once per block, from L2 or L3).  The transformer block's products
 * at (8, 512): 0.90-0.97x on two threads (M = 4096), 0.94-1.0x on one (M =
 * 2048, a split kernel's half), same library, alternating.
 * Only where A outweighs B (M > N): blocks of a few rows against a bigger
 * weight had streamed all of the weight once per block, from memory (the
 * bench MLP's 64 x 4096 x 1024 product in six blocks, 64 x 1024 x 4096 in
 * a block of 60 rows and one of 4).  Without them, AVX2, two threads, the
 * weights from memory, same library, alternating: 64 x 4096 x 1024 0.925-
 * 0.967x, 32 x 4096 x 1024 0.955-0.969x, 96 x 1024 x 4096 0.953x, 64 x
 * 1024 x 4096 0.972-0.987x. */
static void panels(void *ctx, int64_t lo, int64_t hi) {
  const gemm_args *g = ctx;
  int64_t mc = GEMM_A_BLOCK_BYTES / (g->K * (int64_t)sizeof(float)) / MR * MR; /* K > 0 here */
  if (mc < MR) mc = MR;
  if (mc >= g->M || g->M <= g->N) {
    panel_range(g, lo, hi);
    return;
  }
  for (int64_t r0 = 0; r0 < g->M; r0 += mc) {
    gemm_args part = *g;
    part.M = g->M - r0 < mc ? g->M - r0 : mc;
    part.A = g->A + r0 * g->lda;
    part.C = g->C + r0 * g->ldc;
    part.R = g->R != NULL ? g->R + r0 * g->ldr : NULL;
    panel_range(&part, lo, hi);
  }
}

/* C[M, N] = A[M, K] B[K, N] (beta = 0) or C += A B (beta = 1); row-major,
 * leading dims in elements, on up to `threads` threads of the pool; `slot`
 * is the address of B's packing slot (B a constant) or 0.  Pointers cross
 * as int64 like the sgemm calls of kiln-cpu-library.  Each tile then gets
 * C = act(C + bias) + R in registers before it is stored (bias [N] or 0,
 * act KILN_ACT_*, R rows ldr apart or 0): kiln_bias_act's epilogue without
 * its pass over C. */
/* C = A B^T (+ C) by kiln_sgemm_par (its GEMV up to KILN_GEMV_ROWS rows),
 * then the epilogue: B^T read as it is, nothing packed. */
static void gemm_bt_unpacked(int64_t M, int64_t N, int64_t K, int64_t A, int64_t lda, int64_t B, int64_t ldb,
                             float beta, int64_t C, int64_t ldc, int32_t threads, int64_t bias, int32_t act,
                             int64_t R, int64_t ldr) {
  kiln_sgemm_par(101, 111, 112, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc, threads);
  if (bias || act != KILN_ACT_NONE || R) kiln_bias_act(M, N, C, ldc, bias, act, R, ldr, threads);
}

static void small_gemm(int64_t M, int64_t N, int64_t K, int64_t A, int64_t lda, int64_t B, int64_t ldb, float beta,
                       int64_t C, int64_t ldc, int32_t threads, int64_t slot, int64_t bias, int32_t act, int64_t R,
                       int64_t ldr, int trans) {
  gemm_args g = {M, N, K, lda, ldb, ldc, (const float *)A, (const float *)B, NULL, (float *)C, beta != 0.0f,
                 (const float *)bias, act, (const float *)R, ldr};
  if (K == 0) { /* an empty reduction: C = 0, or C unchanged (a partial panel's K loop would store nothing) */
    if (!g.accumulate)
      for (int64_t i = 0; i < M; i++) memset(g.C + i * ldc, 0, (size_t)N * sizeof(float));
    if (has_epilogue(&g)) kiln_bias_act(M, N, C, ldc, bias, act, R, ldr, threads);
    return;
  }
  g.P = packed_for(slot, g.B, K, N, ldb, trans);
  if (trans && g.P == NULL) { /* no packed copy (memory, another matrix) */
    gemm_bt_unpacked(M, N, K, A, lda, B, ldb, beta, C, ldc, threads, bias, act, R, ldr);
    return;
  }
  /* A is read in place, MR rows at a time.  It had been packed into blocks
   * of MR rows first (a pass over A on the pool) from 16 M FMAs, which paid
   * on an early build on Zen 5, when A's rows lay on small pages (M = 9 / 32
   * / 64 0.87-0.97x); with huge-page arenas, on Zen 4 it cost every shape
   * measured: 512 x 256 x 256 0.92x without, 512 x 1024 x 256 0.93x, 4096 x
   * 1024 x 256 0.93x, 64 x 4096 x 1024 0.98x, 64 x 1024 x 4096 1.00x (C
   * harness, two threads); the transformer block (4, 128) 0.970x, (8, 512)
   * 0.964x, MLP B=64 0.99-1.01x (worker pairs). */
  /* Panels in balanced ranges (kiln_parts) from PF_FIRST_ROWS rows of A on:
   * two threads, AVX2, the weights from memory, same library, alternating:
   * 64 x 4096 x 1024 0.86-0.94x, 64 x 1024 x 4096 0.95x, 96 x 256 x 1024
   * 0.94x.  With fewer rows a thread's range is a stream from memory, and
   * cut in four it lost its continuity: 1 x 1024 x 4096 1.12x, 8 x 4096 x
   * 1024 1.0-1.04x, the bench MLP at B=8 1.04x.  AVX-512 builds keep one
   * range per thread (PF_FIRST_ROWS is unbounded there; not measured). */
  int64_t np = (N + NR - 1) / NR;
  kiln_parallel_for(panels, &g, np, M < PF_FIRST_ROWS ? threads : kiln_parts(np, threads));
}

void kiln_sgemm_small_epi(int64_t M, int64_t N, int64_t K, int64_t A, int64_t lda, int64_t B, int64_t ldb,
                          float beta, int64_t C, int64_t ldc, int32_t threads, int64_t slot, int64_t bias,
                          int32_t act, int64_t R, int64_t ldr) {
  small_gemm(M, N, K, A, lda, B, ldb, beta, C, ldc, threads, slot, bias, act, R, ldr, 0);
}

/* kiln_sgemm_small_epi for a constant B given transposed (B^T [N, K], rows
 * ldb apart: nn.Linear's weight that was too large to transpose at compile
 * time).  Up to GEMV_ROWS rows, kiln_sgemm_par's GEMV streams B^T as it is
 * (no packed copy of a weight that a decode step reads only this way: an
 * LM head's [32000, 768] 98 MB); more rows pack it on first use. */
void kiln_sgemm_small_bt(int64_t M, int64_t N, int64_t K, int64_t A, int64_t lda, int64_t B, int64_t ldb,
                         float beta, int64_t C, int64_t ldc, int32_t threads, int64_t slot, int64_t bias,
                         int32_t act, int64_t R, int64_t ldr) {
  if (M <= KILN_GEMV_ROWS && K > 0) {
    gemm_bt_unpacked(M, N, K, A, lda, B, ldb, beta, C, ldc, threads, bias, act, R, ldr);
    return;
  }
  small_gemm(M, N, K, A, lda, B, ldb, beta, C, ldc, threads, slot, bias, act, R, ldr, 1);
}

/* C[M, nr] = A[M, K] B (accumulate 0) or C += A B for one packed panel B
 * ([K][KILN_NR], zeros past nr <= KILN_NR), on the calling thread: for a
 * kernel that makes each panel itself (kiln_w8_gemm widens an int8 weight
 * one panel at a time, so the f32 copy never leaves L2). */
void kiln_sgemm_panel(int64_t M, int64_t nr, int64_t K, const float *A, int64_t lda, const float *panel_b,
                      int accumulate, float *C, int64_t ldc) {
  gemm_args g = {M, nr, K, lda, NR, ldc, A, NULL, NULL, C, accumulate, NULL, KILN_ACT_NONE, NULL, 0};
  panel(&g, 0, panel_b, NR, nr, NULL);
}

/* kiln_sgemm_small_epi without an epilogue. */
void kiln_sgemm_small(int64_t M, int64_t N, int64_t K, int64_t A, int64_t lda, int64_t B, int64_t ldb, float beta,
                      int64_t C, int64_t ldc, int32_t threads, int64_t slot) {
  kiln_sgemm_small_epi(M, N, K, A, lda, B, ldb, beta, C, ldc, threads, slot, 0, KILN_ACT_NONE, 0, 0);
}

/* ---------------------------------------------------------------------------
 * AMX tiles (kiln_lowp.c's bf16 and kiln_i8.c's int8 products)
 * ------------------------------------------------------------------------- */

static int amx_granted = -1; /* 1: the tile unit is there and Linux granted the tile data (asked once) */

int kiln_amx_usable(int cpuid_edx_bit) {
#if defined(__x86_64__) && (__GNUC__ >= 11)
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << cpuid_edx_bit))) return 0;
  if (amx_granted < 0) /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): else the first tile op is a SIGILL */
    amx_granted = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return amx_granted;
#else
  (void)cpuid_edx_bit;
  return 0;
#endif
}

#if defined(__x86_64__) && (__GNUC__ >= 11)
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_tilecfg;

__attribute__((target("amx-tile"))) void kiln_amx_config(void) {
  amx_tilecfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  /* gcc 12 does not count ldtilecfg as a read of cfg: without the barrier it dropped the stores to rows and
   * colsb (tiles left unconfigured: the first tilezero is a SIGILL). */
  __asm__ volatile("" : : "m"(cfg) : "memory");
  _tile_loadconfig(&cfg);
}

__attribute__((target("amx-tile"))) void kiln_amx_release(void) { _tile_release(); }
#else
void kiln_amx_config(void) {}
void kiln_amx_release(void) {}
#endif

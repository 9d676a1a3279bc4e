/*
** lmeter.c -- the meter of quirl-lua-worker's Lua 5.4 (our code, not Lua's).
** See lmeter.h for what it does and the crate's README for every hunk of
** the patch that calls it.
*/

#define lmeter_c
#define LUA_CORE

#include "lprefix.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#if defined(__linux__)
#include <sys/random.h>
#endif

#include "lua.h"

#include "ldebug.h"
#include "ldo.h"
#include "lgc.h"
#include "lmeter.h"
#include "lobject.h"
#include "lstate.h"
#include "lstring.h"
#include "ltable.h"


/* ltable.c keeps a mark in each node ('key_mark', lobject.h), in what
   was padding: a node must be no larger than Lua's own */
struct luaQ_StockNodeKey { TValuefields; lu_byte key_tt; int next;
                           Value key_val; };
union luaQ_StockNode { struct luaQ_StockNodeKey u; TValue i_val; };
typedef char luaQ_node_is_no_larger
    [(sizeof(Node) == sizeof(union luaQ_StockNode)) ? 1 : -1];
/* The meter keeps its size on 64-bit targets (lmeter.h, 'keepsize') */
typedef char luaQ_meter_keeps_its_size
    [(sizeof(void *) != 8 || sizeof(luaQ_Meter) == LUAQ_METER_BYTES) ? 1 : -1];


/*
** {======================================================
** The process secret
** =======================================================
*/

/*
** Drawn once per process, before the first state is complete, from the
** kernel's random source. Table hashes must be a pure function of the key
** (a table knows nothing of its state), so the secret is the process's;
** the worker runs one state per process.
*/
static uint64_t secret[4];
static int secret_ready = 0;

static uint64_t mum (uint64_t a, uint64_t b) {
#if defined(__SIZEOF_INT128__)
  unsigned __int128 r = (unsigned __int128)a * b;
  return (uint64_t)r ^ (uint64_t)(r >> 64);
#else
  uint64_t h = a * (b | 1);
  return h ^ (h >> 29) ^ (b * 0x9E3779B97F4A7C15ull);
#endif
}

static void draw_secret (void) {
  if (__atomic_load_n(&secret_ready, __ATOMIC_ACQUIRE))
    return;
  {
    uint64_t fresh[4];
    size_t got = 0;
#if defined(__linux__)
    while (got < sizeof(fresh)) {
      ssize_t n = getrandom((char *)fresh + got, sizeof(fresh) - got, 0);
      if (n <= 0) break;
      got += (size_t)n;
    }
#endif
    if (got < sizeof(fresh)) {  /* no kernel source: the clock and ASLR */
      struct timespec ts;
      int i;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      fresh[0] = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32);
      fresh[1] = (uint64_t)(size_t)&ts ^ (uint64_t)(size_t)&draw_secret;
      for (i = 2; i < 4; i++)
        fresh[i] = mum(fresh[i - 1] ^ 0xA0761D6478BD642Full,
                       fresh[i - 2] ^ 0xE7037ED1A0B428DBull);
    }
    /* two threads may draw at once: either draw is a good secret, and
       no hash exists before the first state is complete */
    memcpy(secret, fresh, sizeof(secret));
    __atomic_store_n(&secret_ready, 1, __ATOMIC_RELEASE);
  }
}

/* A keyed mix of 'x': what number and pointer keys hash by (ltable.c) */
uint64_t luaQ_mix (uint64_t x) {
  return mum(mum(x ^ secret[0], secret[1] ^ 0xA0761D6478BD642Full) ^ secret[2],
             secret[3] ^ 0xE7037ED1A0B428DBull);
}

/*
** The hash of a long string (lstring.c, 'luaS_hashlongstr'; once per
** string): its 8-byte words folded through 'mum' with the secret, the
** length and the state's seed, then mixed once more. Without the secret
** no text is more likely than another to share a hash; Lua's own hash of
** long strings collapses a long common prefix.
*/
unsigned int luaQ_hashlong (const char *s, size_t l, unsigned int seed) {
  uint64_t h = secret[0] ^ ((uint64_t)seed << 32) ^ (uint64_t)l;
  uint64_t w;
  for (; l >= 8; l -= 8, s += 8) {
    memcpy(&w, s, 8);
    h = mum(h ^ w, secret[1] ^ 0xA0761D6478BD642Full);
  }
  w = 0;
  memcpy(&w, s, l);
  h = mum(h ^ w ^ ((uint64_t)l << 59), secret[2] ^ 0xE7037ED1A0B428DBull);
  h = mum(h, secret[3] ^ 0x8EBC6AF09C88C6E3ull);
  return (unsigned int)(h ^ (h >> 32));
}


/*
** Whether long strings 'a' and 'b', a key looked up in a hash part and a
** key of the same 32-bit hash there ('equalkey', ltable.c), have the same
** text. Equal texts are charged per LUAQ_MEM_BYTES (what 'luaS_eqlngstr'
** charges for them), after the comparison; a collision of the keyed hash
** is compared uncharged: which keys collide depends on the secret and the
** seed (among n keys about n^2/2^33 pairs do, whatever their text), so a
** charge for it would move the trip point between runs (DESIGN 15.6-a).
*/
int luaQ_eqlngkey (TString *a, TString *b) {
  size_t len = a->u.lnglen;
  if (len != b->u.lnglen || memcmp(getlngstr(a), getlngstr(b), len) != 0)
    return 0;
  luaQ_chargerunning(cast(l_mem, len / LUAQ_MEM_BYTES));
  return 1;
}


/* The string seed of a new state ('luai_makeseed') */
unsigned int luaQ_seed (void) {
  uint64_t r = 0;
  draw_secret();
#if defined(__linux__)
  if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
#endif
    r = luaQ_mix((uint64_t)(size_t)&r);
  return (unsigned int)(r ^ (r >> 32));
}

/* A random 64-bit value of state 'L' (math.randomseed without arguments) */
uint64_t luaQ_random (lua_State *L) {
  global_State *g = G(L);
  g->meter.lastrandom++;
  return luaQ_mix(luaQ_mix((uint64_t)g->seed ^ (g->meter.lastrandom << 32))
                  ^ g->meter.lastrandom);
}

/* }====================================================== */


/*
** {======================================================
** The running state of this thread
** =======================================================
*/

#if defined(__GNUC__)
static __thread global_State *running = NULL;
#else
static _Thread_local global_State *running = NULL;
#endif

global_State *luaQ_running (void) {
  return running;
}

global_State *luaQ_enter (global_State *g) {
  global_State *previous = running;
  running = g;
  return previous;
}

void luaQ_leave (global_State *previous) {
  running = previous;
}

/* 'g' is closed: never charge it again */
void luaQ_forget (global_State *g) {
  if (running == g)
    running = NULL;
}

/* }====================================================== */


/*
** {======================================================
** Budget windows, slices and stops
** =======================================================
*/

static uint64_t now_ns (void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}


/*
** A slice of 'n' units starts now; while a dispatch is forced
** ('luaQ_force'), an empty one, so that the next unit, whoever charges
** it, comes back to 'luaQ_settle' and the next dispatch to 'luaQ_poll'.
*/
static void open_slice (luaQ_Meter *m, l_mem n) {
  m->slice = m->left = m->forced ? 0 : n;
}


/* Called from 'lua_newstate' (lstate.c), before the first allocation */
void luaQ_init (global_State *g) {
  luaQ_Meter *m = &g->meter;
  draw_secret();
  memset(m, 0, sizeof(*m));
  open_slice(m, LUAQ_IDLE_SLICE);
}


/* Called from 'f_luaopen' (lstate.c): the value every stop raises */
void luaQ_open (lua_State *L) {
  global_State *g = G(L);
  g->meter.stopmsg = luaS_newliteral(L, "the sandbox stopped this request");
  luaC_fix(L, obj2gco(g->meter.stopmsg));  /* a new string: never collected */
}


static void record_stop (luaQ_Meter *m, int reason) {
  if (m->stop == LUAQ_RUNNING) {
    m->stop = reason;
    m->stopped_ns = now_ns();
    m->stopped_used = m->used;
  }
}


/* The stop the clock or the cancellation flag demands now, if any */
static int clock_stop (luaQ_Meter *m) {
  if (m->cancel != NULL && __atomic_load_n(m->cancel, __ATOMIC_RELAXED))
    return LUAQ_CANCELLED;
  if (m->active && now_ns() > m->deadline_ns)
    return LUAQ_WALLTIME;
  return LUAQ_RUNNING;
}


/*
** Account for the units of the current slice, check the limit, the clock
** and the cancellation flag, and open the next slice: the smaller of the
** clock interval and what the window has left, so that the limit trips
** at exactly the first unit past it. Returns the stop (0 while running).
** Never raises.
*/
int luaQ_settle (global_State *g) {
  luaQ_Meter *m = &g->meter;
  m->used += cast(lu_mem, m->slice - m->left);
  if (m->stop == LUAQ_RUNNING && m->active) {
    if (m->used > m->limit)
      record_stop(m, LUAQ_INSTRUCTIONS);
    else {
      int reason = clock_stop(m);
      if (reason != LUAQ_RUNNING)
        record_stop(m, reason);
    }
  }
  if (m->stop != LUAQ_RUNNING)
    open_slice(m, 0);  /* every later unit comes back here */
  else if (!m->active) {
    m->used = 0;
    open_slice(m, LUAQ_IDLE_SLICE);
  }
  else {
    lu_mem rest = m->limit - m->used;
    open_slice(m, (rest < LUAQ_CLOCK_INTERVAL)
                  ? cast(l_mem, rest) : LUAQ_CLOCK_INTERVAL);
  }
  return m->stop;
}


/*
** Charge 'units' where no error may be raised; returns the stop (0 while
** running). The stop takes effect at the next instruction.
*/
int luaQ_chargequiet (global_State *g, l_mem units) {
  luaQ_Meter *m = &g->meter;
  m->left -= units;
  if (m->left < 0)
    return luaQ_settle(g);
  return m->stop;
}


/* Push the stop value and throw it: no message handler runs */
l_noret luaQ_raise (lua_State *L) {
  luaD_checkstack(L, 1);
  setsvalue2s(L, L->top.p, G(L)->meter.stopmsg);
  L->top.p++;
  luaD_throw(L, LUA_ERRRUN);
}


/* Charge 'units' where errors may be raised (inside a call) */
void luaQ_charge (lua_State *L, l_mem units) {
  if (luaQ_chargequiet(G(L), units) != LUAQ_RUNNING)
    luaQ_raise(L);
}


/* Charge the state whose protected call is running on this thread */
void luaQ_chargerunning (l_mem units) {
  global_State *g = running;
  if (g != NULL)
    luaQ_chargequiet(g, units);
}


/*
** The dispatch check of 'vmfetch' found the slice used up, before the
** instruction at 'pc'. Raising here is like raising from a hook.
*/
void luaQ_poll (lua_State *L, const Instruction *pc) {
  G(L)->meter.forced = 0;  /* this is the dispatch 'luaQ_force' asked for */
  if (luaQ_settle(G(L)) != LUAQ_RUNNING) {
    CallInfo *ci = L->ci;
    ci->u.l.savedpc = pc + 1;  /* the instruction that was not run */
    L->top.p = ci->top.p;  /* the frame is discarded: any free slot will do */
    luaQ_raise(L);
  }
}


/*
** 'luaV_execute' set its 'trap' (lmeter.h, 'luaQ_trap'): end the slice
** here, keeping what it has used ('slice - left' is unchanged), so the
** next dispatch takes the slow path of 'vmfetch', which calls 'luaQ_poll'
** and then looks at 'trap'. Units charged meanwhile by anyone find an
** empty slice and settle (the next slice is empty too while 'forced').
*/
void luaQ_force (lua_State *L) {
  luaQ_Meter *m = &G(L)->meter;
  m->forced = 1;
  m->slice -= m->left;
  m->left = 0;
}


int luaQ_stopped (lua_State *L) {
  return G(L)->meter.stop;
}


int luaQ_sandboxed (lua_State *L) {
  return G(L)->meter.sandbox;
}

/* }====================================================== */


/*
** {======================================================
** Memory
** =======================================================
*/

/*
** An allocation is about to grow the heap by 'growth' bytes; 0: refuse
** it. The first attempt ('first') is charged (one unit per
** LUAQ_BYTES_PER_UNIT, gross) and checks the clock every LUAQ_CLOCK_BYTES;
** the retry after an emergency collection only checks the limit.
*/
int luaQ_allowgrowth (global_State *g, size_t growth, int first) {
  luaQ_Meter *m = &g->meter;
  if (m->stop != LUAQ_RUNNING)
    return growth <= LUAQ_STOPPED_GROWTH;
  if (m->memlimit != 0 && (growth > m->memlimit ||
                           luaQ_inuse(g) > m->memlimit - growth))
    return 0;
  if (first && m->active) {
    lu_mem before = m->allocated;
    l_mem units;
    m->allocated += growth;
    units = cast(l_mem, m->allocated / LUAQ_BYTES_PER_UNIT
                        - before / LUAQ_BYTES_PER_UNIT);
    if (units > 0 && luaQ_chargequiet(g, units) != LUAQ_RUNNING)
      return 0;
    m->sinceclock += growth;
    if (m->sinceclock >= LUAQ_CLOCK_BYTES) {
      int reason;
      m->sinceclock = 0;
      reason = clock_stop(m);
      if (reason != LUAQ_RUNNING) {
        record_stop(m, reason);
        open_slice(m, 0);
        return 0;
      }
    }
  }
  return 1;
}


/* The retry after an emergency collection failed too: a memory trip */
void luaQ_refused (global_State *g, size_t growth) {
  luaQ_Meter *m = &g->meter;
  if (m->stop == LUAQ_RUNNING) {
    m->requested = growth;
    m->inuse = luaQ_inuse(g);
    m->used += cast(lu_mem, m->slice - m->left);
    open_slice(m, 0);
    record_stop(m, LUAQ_MEMORY);
  }
}

/* }====================================================== */


/*
** {======================================================
** The collector
** =======================================================
*/

/*
** A collection the program asked for ('collectgarbage') or that the
** memory limit forced (lmem.c, 'tryagain') did 'work' (the count of
** lgc.c): charge it where no error may be raised. The collector marks
** everything in one step and sweeps in the order of its object lists
** (lgc.c), so the same program does the same work in every run.
*/
void luaQ_chargegc (global_State *g, lu_mem work) {
  l_mem units = cast(l_mem, work / LUAQ_GC_WORK_PER_UNIT);
  if (units > 0)
    luaQ_chargequiet(g, units);
}


/*
** A pass of ephemeron convergence (lgc.c) is about to scan 'slots'
** slots: charge it (every pass, of every collection: convergence is
** quadratic in the length of key->value chains). Returns the stop: once
** the state has stopped, the collector finishes without further passes.
*/
int luaQ_gcslots (global_State *g, lu_mem slots) {
  l_mem units = cast(l_mem, slots / LUAQ_GC_SLOTS_PER_UNIT);
  if (g->meter.stop != LUAQ_RUNNING)
    return g->meter.stop;
  return (units > 0) ? luaQ_chargequiet(g, units) : LUAQ_RUNNING;
}


/*
** The metatable of a userdata changes from 'old' to 'mt' (lapi.c), or the
** userdata is freed ('mt' NULL, lgc.c). A host error object (mlua's
** wrapped callback error, whose metatable the host named with
** 'lua_meter_hosterrors') holds a traceback and an error on the host's
** heap, outside Lua's count: while it lives, the meter counts
** LUAQ_HOST_ERROR_BYTES for it against the memory limit.
*/
void luaQ_setudatamt (lua_State *L, const Table *old, const Table *mt) {
  luaQ_Meter *m = &G(L)->meter;
  if (m->errmt == NULL || old == mt)
    return;
  if (mt == m->errmt) {
    m->errors++;
    m->heldbytes += LUAQ_HOST_ERROR_BYTES;
  }
  else if (old == m->errmt && m->errors > 0) {  /* (objects made before
                                                   the host named it) */
    m->errors--;
    m->heldbytes -= LUAQ_HOST_ERROR_BYTES;
  }
}

/* }====================================================== */


/*
** {======================================================
** Traversals
** =======================================================
*/

/*
** 'next' scanned from 'from' to 'to' ('findindex' numbering: array slots
** first, then the nodes; 'to' is that of the key returned, or one past the
** end). The array part is charged exactly; a scan of the hash part is
** charged at the whole part unless it 'continues' a traversal (its key is
** marked in its node as the last one 'next' returned, ltable.c). Where the
** keys sit in the hash part depends on the secret; these charges do not,
** so a budget trips at the same point in every run.
*/
void luaQ_chargenext (lua_State *L, unsigned int asize, unsigned int nsize,
                      unsigned int from, unsigned int to, int continues) {
  lu_mem units = 0;
  if ((lu_mem)asize + nsize <= LUAQ_SMALL_TABLE)
    return;
  if (from < asize)  /* started in the array part */
    units += ((to < asize) ? to : asize) - from;
  if ((to > asize || from >= asize) && !continues)  /* scanned the hash part */
    units += nsize;
  units /= LUAQ_SLOTS_PER_UNIT;
  if (units > 0)
    luaQ_chargequiet(G(L), cast(l_mem, units));
}

/* }====================================================== */


/*
** {======================================================
** API
** =======================================================
*/

LUA_API void lua_meter_configure (lua_State *L, size_t memlimit,
                                  const volatile unsigned char *cancel,
                                  int sandbox) {
  luaQ_Meter *m = &G(L)->meter;
  m->memlimit = memlimit;
  m->cancel = cancel;
  m->sandbox = sandbox;
}


/*
** From now on lmem.c allocates, resizes and frees the state's blocks with
** the C library's realloc/free instead of the state's 'lua_Alloc' (stock
** Lua's own 'l_alloc' does the same), one indirect call and the host
** allocator's bookkeeping less per block. The host calls it only where
** every block its 'lua_Alloc' returned is a C library block, since blocks
** allocated before the call are resized and freed here.
*/
LUA_API void lua_meter_libcalloc (lua_State *L) {
  G(L)->meter.libcalloc = 1;
}


LUA_API void lua_meter_begin (lua_State *L, lua_Integer limit,
                              lua_Integer wall_ns) {
  global_State *g = G(L);
  luaQ_Meter *m = &g->meter;
  uint64_t now = now_ns();
  m->active = 1;
  m->used = 0;
  m->limit = (limit < 0) ? 0 : cast(lu_mem, limit);
  m->started_ns = now;
  m->deadline_ns = (wall_ns < 0) ? now
                   : (UINT64_MAX - now < (uint64_t)wall_ns) ? UINT64_MAX
                   : now + (uint64_t)wall_ns;
  m->allocated = 0;
  m->sinceclock = 0;
  if (m->stop == LUAQ_RUNNING) {
    lu_mem first = (m->limit < LUAQ_CLOCK_INTERVAL)
                   ? m->limit : LUAQ_CLOCK_INTERVAL;
    open_slice(m, cast(l_mem, first));
  }
}


LUA_API void lua_meter_end (lua_State *L) {
  luaQ_Meter *m = &G(L)->meter;
  if (m->stop == LUAQ_RUNNING) {
    m->used += cast(lu_mem, m->slice - m->left);
    open_slice(m, LUAQ_IDLE_SLICE);
  }
  m->active = 0;
}


/* Record a stop of the host's (first one wins); returns the stop kept */
LUA_API int lua_meter_stop (lua_State *L, int reason) {
  luaQ_Meter *m = &G(L)->meter;
  if (m->stop == LUAQ_RUNNING) {
    m->used += cast(lu_mem, m->slice - m->left);
    open_slice(m, 0);
    record_stop(m, reason);
  }
  return m->stop;
}


/*
** Clear a LUAQ_EXIT stop (the guest's os.exit, which the host records with
** 'lua_meter_stop'), after the request it ended: unwinding to the host
** leaves the state as an error caught at the top would, so it may run
** the next request. Any other stop stays.
*/
LUA_API void lua_meter_clearexit (lua_State *L) {
  luaQ_Meter *m = &G(L)->meter;
  if (m->stop == LUAQ_EXIT) {
    m->stop = LUAQ_RUNNING;
    luaQ_settle(G(L));  /* opens the next slice */
  }
}


/* Charge 'units' from host code; returns the stop (0 while running) */
LUA_API int lua_meter_charge (lua_State *L, lua_Integer units) {
  return luaQ_chargequiet(G(L), (units < 0) ? 0 : cast(l_mem, units));
}


/* Check the clock and cancellation now; returns the stop */
LUA_API int lua_meter_check (lua_State *L) {
  luaQ_Meter *m = &G(L)->meter;
  if (m->stop == LUAQ_RUNNING && m->active) {
    int reason = clock_stop(m);
    if (reason != LUAQ_RUNNING) {
      m->used += cast(lu_mem, m->slice - m->left);
      open_slice(m, 0);
      record_stop(m, reason);
    }
  }
  return m->stop;
}


LUA_API void lua_meter_status (lua_State *L, lua_MeterStatus *out) {
  global_State *g = G(L);
  luaQ_Meter *m = &g->meter;
  int stopped = (m->stop != LUAQ_RUNNING);
  uint64_t until = stopped ? m->stopped_ns : now_ns();
  out->stop = m->stop;
  out->active = m->active;
  out->used = cast(lua_Integer, stopped ? m->stopped_used
                                : m->used + cast(lu_mem, m->slice - m->left));
  if (m->stop == LUAQ_INSTRUCTIONS)
    out->used = cast(lua_Integer, m->stopped_used);
  out->limit = cast(lua_Integer, m->limit);
  out->elapsed_ns = cast(lua_Integer, (until > m->started_ns)
                                      ? until - m->started_ns : 0);
  out->memory_in_use = cast(lua_Integer, luaQ_inuse(g));
  out->memory_limit = cast(lua_Integer, m->memlimit);
  out->requested = cast(lua_Integer, m->requested);
  out->memory_at_refusal = cast(lua_Integer, m->inuse);
}


LUA_API lua_Integer lua_meter_remaining_ns (lua_State *L) {
  luaQ_Meter *m = &G(L)->meter;
  uint64_t now = now_ns();
  if (!m->active || now >= m->deadline_ns)
    return 0;
  return cast(lua_Integer, m->deadline_ns - now);
}


LUA_API lua_Unsigned lua_meter_random (lua_State *L) {
  return (lua_Unsigned)luaQ_random(L);
}


LUA_API void lua_meter_raise (lua_State *L) {
  luaQ_raise(L);
}


/*
** A result of 'bytes' is about to be built: when it cannot fit in the
** memory limit, record the memory trip it would end in (without trying to
** allocate it) and return 1.
*/
LUA_API int lua_meter_reserve (lua_State *L, double bytes) {
  global_State *g = G(L);
  luaQ_Meter *m = &g->meter;
  if (m->memlimit == 0 || bytes <= (double)m->memlimit - (double)luaQ_inuse(g))
    return 0;
  if (bytes <= (double)m->memlimit && completestate(g) && !g->gcstopem &&
      m->stop == LUAQ_RUNNING) {
    /* as an allocation would: an emergency collection, charged by its
       work, before the refusal */
    lu_mem work = m->gcwork;
    luaC_fullgc(L, 1);
    luaQ_chargegc(g, m->gcwork - work);
    if (m->stop == LUAQ_RUNNING &&
        bytes <= (double)m->memlimit - (double)luaQ_inuse(g))
      return 0;
  }
  luaQ_refused(g, (bytes >= (double)MAX_SIZE) ? MAX_SIZE : (size_t)bytes);
  return 1;
}


/*
** A 'luaL_Buffer' box (lauxlib.c) is resized from 'oldsize' to 'newsize'
** bytes. Lua allocates boxes with the state's allocator directly, outside
** lmem.c and its count, so the meter counts them: a growth is held to the
** memory limit and charged like any other allocation ('luaQ_allowgrowth');
** a refusal records the memory trip and returns 1 (the caller raises the
** stop). A shrink returns 0.
*/
LUA_API int lua_meter_box (lua_State *L, size_t oldsize, size_t newsize) {
  global_State *g = G(L);
  luaQ_Meter *m = &g->meter;
  if (newsize > oldsize) {
    size_t growth = newsize - oldsize;
    if (!luaQ_allowgrowth(g, growth, 1)) {
      luaQ_refused(g, growth);
      return 1;
    }
    m->boxbytes += growth;
    m->heldbytes += growth;
  }
  else {
    size_t shrink = oldsize - newsize;
    if (shrink > m->boxbytes) shrink = m->boxbytes;
    m->boxbytes -= shrink;
    m->heldbytes -= shrink;
  }
  return 0;
}


static lu_mem slots_of (const Table *t) {
  return cast(lu_mem, luaH_realasize(t)) + (isdummy(t) ? 0 : sizenode(t));
}


/*
** Slots of the table at 'idx' and of every table it holds as a value (the
** loaded-modules table: what a search for a function's name may walk).
** Reads no metamethod and allocates nothing.
*/
LUA_API lua_Integer lua_meter_loadedslots (lua_State *L, int idx) {
  const Table *t;
  lu_mem total;
  unsigned int i;
  if (lua_type(L, idx) != LUA_TTABLE)
    return 0;
  t = (const Table *)lua_topointer(L, idx);
  total = slots_of(t);
  for (i = 0; i < luaH_realasize(t); i++) {
    if (ttistable(&t->array[i]))
      total += slots_of(hvalue(&t->array[i]));
  }
  if (!isdummy(t)) {
    int n;
    for (n = 0; n < sizenode(t); n++) {
      const TValue *v = gval(gnode(t, n));
      if (ttistable(v))
        total += slots_of(hvalue(v));
    }
  }
  return cast(lua_Integer, total);
}


/* The collector's work count (lgc.c): a collection costs the difference */
LUA_API lua_Integer lua_meter_gcwork (lua_State *L) {
  return cast(lua_Integer, G(L)->meter.gcwork);
}


/*
** The value at 'idx' is a host error object: from now on every userdata
** with its metatable is counted ('luaQ_setudatamt'). The metatable is
** the host's own (kept in the registry), so it lives as long as the state.
*/
LUA_API void lua_meter_hosterrors (lua_State *L, int idx) {
  if (lua_type(L, idx) == LUA_TUSERDATA && lua_getmetatable(L, idx)) {
    G(L)->meter.errmt = (const Table *)lua_topointer(L, -1);
    lua_pop(L, 1);
  }
}


LUA_API int lua_meter_sandboxed (lua_State *L) {
  return G(L)->meter.sandbox;
}


/* Deterministic pivot randomization of 'table.sort' */
LUA_API unsigned int lua_meter_pivot (lua_State *L) {
  return ++G(L)->meter.pivots * 2654435761u;
}


/* Registry key of the object numbers (their addresses) */
static const char objectids_key = 0;

/*
** The number of the object at 'idx', given the first time it is asked
** for: unique while the object lives, never an address (tostring and %p
** in the sandbox). Returns 0 for values without identity and for strings
** (see 'lua_meter_pointerid'). May raise memory errors.
*/
LUA_API lua_Integer lua_meter_objectid (lua_State *L, int idx) {
  int t = lua_type(L, idx);
  lua_Integer id;
  if (!G(L)->meter.sandbox)
    return 0;
  if (t != LUA_TTABLE && t != LUA_TFUNCTION && t != LUA_TTHREAD &&
      t != LUA_TUSERDATA && t != LUA_TLIGHTUSERDATA)
    return 0;
  idx = lua_absindex(L, idx);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &objectids_key) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 0);
    lua_createtable(L, 0, 1);  /* objects are numbered while they live */
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &objectids_key);
  }
  lua_pushvalue(L, idx);
  if (lua_rawget(L, -2) == LUA_TNUMBER)
    id = lua_tointeger(L, -1);
  else {
    id = ++G(L)->meter.lastid;
    lua_pushvalue(L, idx);
    lua_pushinteger(L, id);
    lua_rawset(L, -4);
  }
  lua_pop(L, 2);
  return id;
}


/*
** Speck48/96 (Beaulieu et al., 2013): a keyed permutation of 48-bit
** values, so distinct addresses give distinct numbers, and without the
** key a number tells nothing of the address it came from. 48 bits hold
** every user-space address of x86-64 and AArch64 (4-level tables); the
** bits above, where there are any, are kept, so the whole map is still
** one-to-one. The numbers are as long as addresses (at most 15 digits),
** so widths pad them as Lua pads an address.
*/
#define MASK24		0xFFFFFFu
#define ror24(x,r)	((((x) >> (r)) | ((x) << (24 - (r)))) & MASK24)
#define rol24(x,r)	((((x) << (r)) | ((x) >> (24 - (r)))) & MASK24)

static uint64_t speck48 (uint64_t block, uint64_t key0, uint64_t key1) {
  uint32_t x = (uint32_t)(block >> 24) & MASK24;
  uint32_t y = (uint32_t)block & MASK24;
  uint32_t k = (uint32_t)key0 & MASK24;
  uint32_t l[3];
  uint32_t i;
  l[0] = (uint32_t)(key0 >> 24) & MASK24;
  l[1] = (uint32_t)key1 & MASK24;
  l[2] = (uint32_t)(key1 >> 24) & MASK24;
  for (i = 0; i < 23; i++) {
    x = ((ror24(x, 8) + y) & MASK24) ^ k;
    y = rol24(y, 3) ^ x;
    l[i % 3] = ((ror24(l[i % 3], 8) + k) & MASK24) ^ i;
    k = rol24(k, 3) ^ l[i % 3];
  }
  return ((uint64_t)x << 24) | y;
}


/*
** What '%p' shows for the value at 'idx' in the sandbox, written to
** 'buff' ('#<n>', at most 21 bytes and the terminator): an object's
** number ('lua_meter_objectid'); a string's, the permutation of its
** address under a key of this process. A string is identified as Lua
** identifies it: equal short strings are one object, two long strings
** with the same text are two (Lua's own pm.lua checks that '%p' tells
** them apart), and none is kept alive by being shown. Returns 0 (and
** writes nothing) outside the sandbox and for values without identity.
** May raise memory errors.
*/
LUA_API int lua_meter_pointerid (lua_State *L, int idx, char *buff,
                                 size_t size) {
  if (!G(L)->meter.sandbox)
    return 0;
  if (lua_type(L, idx) == LUA_TSTRING) {
    const uint64_t low = ((uint64_t)1 << 48) - 1;
    uint64_t address = (uint64_t)(size_t)lua_topointer(L, idx);
    uint64_t n = (address & ~low) |
                 speck48(address & low, luaQ_mix(0x7374726E67496430ull),
                         luaQ_mix(0x506F696E74657231ull));
    snprintf(buff, size, "#%llu", (unsigned long long)n);
    return 1;
  }
  else {
    lua_Integer id = lua_meter_objectid(L, idx);
    if (id <= 0)
      return 0;
    snprintf(buff, size, "#" LUA_INTEGER_FMT, (LUAI_UACINT)id);
    return 1;
  }
}

/* }====================================================== */

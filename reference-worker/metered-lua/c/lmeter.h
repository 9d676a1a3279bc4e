/*
** lmeter.h -- the meter of quirl-lua-worker's Lua 5.4 (our code, not Lua's).
**
** One meter per state, inside its global_State, so it lives and dies with
** the state and covers every coroutine of it:
**  - the instruction budget: the interpreter counts every instruction it
**    dispatches (lvm.c, 'vmfetch'), and native work inside one instruction
**    or library call is charged in units where it happens;
**  - the wall-clock deadline and the cancellation flag, checked whenever a
**    slice of at most LUAQ_CLOCK_INTERVAL units is used up, and by the
**    allocator after every LUAQ_CLOCK_BYTES of growth;
**  - the memory limit, enforced by the allocator (lmem.c);
**  - the process secret behind the number and pointer hashes, the string
**    seed, math.randomseed and the object numbers that replace addresses.
**
** A budget window is opened by lua_meter_begin and closed by
** lua_meter_end; outside a window nothing trips (but the memory limit).
** The first stop is sticky: from then on every instruction of every
** thread raises it, without calling any message handler. (The one stop
** the host may clear is the guest's os.exit, LUAQ_EXIT, once the request
** it ended is answered: lua_meter_clearexit.)
**
** See reference-worker/metered-lua/README.md for every hunk of the patch.
*/

#ifndef lmeter_h
#define lmeter_h

#include <stdint.h>
#include <stdlib.h>

#include "lua.h"
#include "llimits.h"
#include "lmeterapi.h"

/* Units between two checks of the clock and the cancellation flag */
#define LUAQ_CLOCK_INTERVAL	1024
/* Bytes of allocation growth between two clock checks */
#define LUAQ_CLOCK_BYTES	(256 * 1024)
/* Bytes of allocation charged as one unit */
#define LUAQ_BYTES_PER_UNIT	64
/* Largest growth still granted once the state has stopped */
#define LUAQ_STOPPED_GROWTH	4096
/* Slice outside a window: nothing is counted against a limit */
#define LUAQ_IDLE_SLICE		((l_mem)1 << 40)

/* Tables of at most this many slots are scanned within their instruction */
#define LUAQ_SMALL_TABLE	64
/* Slots of a 'next' scan charged as one unit */
#define LUAQ_SLOTS_PER_UNIT	4
/* Slots of a rehash (counted and moved) charged as one unit */
#define LUAQ_REHASH_SLOTS_PER_UNIT	16
/* Steps of an '__index'/'__newindex' chain charged as one unit */
#define LUAQ_LOOKUPS_PER_UNIT	8
/* Values of a stack copy ('...', '__call' shifts) charged as one unit */
#define LUAQ_VALUES_PER_UNIT	64
/* Bytes of a byte-at-a-time scan (number conversion) charged as one unit */
#define LUAQ_SCAN_BYTES_PER_UNIT	16
/* Frames of a stack walk charged as one unit */
#define LUAQ_FRAMES_PER_UNIT	8
/* Instructions of a function's code scanned for an error message, per unit */
#define LUAQ_CODE_PER_UNIT	64
/* Bytes of source text compiled, per unit */
#define LUAQ_SOURCE_BYTES_PER_UNIT	4
/* Steps of a jump-list or label walk of the compiler, per unit */
#define LUAQ_COMPILER_STEPS_PER_UNIT	16
/* Slots an ephemeron pass of the collector scans, per unit (lgc.c) */
#define LUAQ_GC_SLOTS_PER_UNIT	8
/*
** Bytes counted for each live error object of the host (mlua's wrapped
** callback error: a traceback of at most ~4 KiB, since names are cut to
** LUAQ_TRACEBACK_NAME, copied as UTF-8 (each invalid byte can become
** three), and the error it wraps)
*/
#define LUAQ_HOST_ERROR_BYTES	(16 * 1024)

typedef struct luaQ_Meter {
  l_mem left;  /* units left in the current slice (the dispatch check) */
  l_mem slice;  /* units the current slice started with */
  lu_mem used;  /* units of this window charged before the current slice */
  lu_mem limit;  /* instruction limit of the window */
  int active;  /* a window is open */
  int forced;  /* the next dispatch takes the slow path ('luaQ_force') */
  int stop;  /* LUAQ_* (sticky) */
  int sandbox;  /* sandbox behaviour (refusals, no addresses) */
  int libcalloc;  /* lmem.c allocates with the C library's realloc/free
                     ('lua_meter_libcalloc') instead of the state's
                     'lua_Alloc' */
  uint64_t started_ns;  /* CLOCK_MONOTONIC when the window opened */
  uint64_t deadline_ns;
  uint64_t stopped_ns;  /* when the stop was recorded */
  lu_mem stopped_used;  /* units charged when the stop was recorded */
  const volatile unsigned char *cancel;  /* the host's flag, or NULL */
  size_t memlimit;  /* bytes; 0: none */
  size_t heldbytes;  /* bytes held outside Lua's own count: the
                        'luaL_Buffer' boxes of lauxlib.c and the host's
                        error objects ('luaQ_setudatamt') */
  size_t boxbytes;  /* of which the boxes */
  lu_mem errors;  /* live host error objects */
  const struct Table *errmt;  /* their metatable ('lua_meter_hosterrors') */
  lu_mem gcwork;  /* the collector's work count: slots traversed and
                     objects swept (lgc.c) */
  size_t requested;  /* size of the refused allocation (memory trips) */
  size_t inuse;  /* bytes in use when it was refused */
  lu_mem allocated;  /* bytes of growth in this window */
  lu_mem sinceclock;  /* growth since the last clock check */
  lua_Integer lastid;  /* the last object number given */
  unsigned int pivots;  /* deterministic pivot choices of 'table.sort' */
  uint64_t lastrandom;  /* draws of 'luaQ_random' */
  struct TString *stopmsg;  /* the value every stop raises (fixed) */
  /* Keeps the meter, and so the state's first block, at the size it had
     when BENCHMARKS.md measured the interpreter: 'vmfetch' decrements
     'left' in memory at every instruction, and when the block shrank by
     these bytes spectral-norm ran 1.58x slower with the same machine code
     for 'luaV_execute' (where the counter falls relative to the stack
     slots the same instructions store to; 4 KiB aliasing is the likely
     cause). BENCHMARKS.md, "The metered VM audited loop by loop". Shrink
     it when a field is added ('LUAQ_METER_BYTES', checked in lmeter.c). */
  char keepsize[488];
} luaQ_Meter;

/* The meter's size (see 'keepsize') */
#define LUAQ_METER_BYTES	696


/* Steps of a walk of the compiler's lists (lcode.c, lparser.c) */
#define luaQ_chargesteps(L,n) \
  { if ((n) >= LUAQ_COMPILER_STEPS_PER_UNIT) \
      luaQ_charge(L, cast(l_mem, (n) / LUAQ_COMPILER_STEPS_PER_UNIT)); }

/* The units left in the current slice, which 'luaV_execute' keeps the
** address of in a local ('G(L)' is fixed for 'L', so one load less per
** instruction) */
#define luaQ_left(L)	(&G(L)->meter.left)

/*
** 'trap' of 'luaV_execute' is set (a stack reallocation or a hook): the
** next dispatch must take the slow path ('luaQ_force'), which is the only
** place 'vmfetch' looks at 'trap'.
*/
#define luaQ_trap(L,t)	(l_unlikely(t) ? luaQ_force(L) : cast_void(0))


struct global_State;

/* The state whose protected call runs innermost on this thread (set by
** 'luaD_rawrunprotected'): charges from code that has no 'L' */
LUAI_FUNC struct global_State *luaQ_running (void);
LUAI_FUNC struct global_State *luaQ_enter (struct global_State *g);
LUAI_FUNC void luaQ_leave (struct global_State *previous);
LUAI_FUNC void luaQ_forget (struct global_State *g);

LUAI_FUNC void luaQ_init (struct global_State *g);
LUAI_FUNC void luaQ_open (lua_State *L);
LUAI_FUNC void luaQ_poll (lua_State *L, const Instruction *pc);
LUAI_FUNC void luaQ_force (lua_State *L);
LUAI_FUNC int luaQ_settle (struct global_State *g);
LUAI_FUNC int luaQ_chargequiet (struct global_State *g, l_mem units);
LUAI_FUNC void luaQ_charge (lua_State *L, l_mem units);
LUAI_FUNC void luaQ_chargerunning (l_mem units);
LUAI_FUNC l_noret luaQ_raise (lua_State *L);
LUAI_FUNC int luaQ_stopped (lua_State *L);
LUAI_FUNC int luaQ_sandboxed (lua_State *L);

/* Allocator */
LUAI_FUNC int luaQ_allowgrowth (struct global_State *g, size_t growth,
                                int first);
LUAI_FUNC void luaQ_refused (struct global_State *g, size_t growth);

/*
** The common case of a first try ('luaQ_allowgrowth(g, n, 1)'), inline in
** lmem.c: a window runs, the growth stays under the memory limit
** ('total' is 'luaQ_inuse(g)'), and neither the slice nor the clock
** interval of allocation ends with it. Grants and charges exactly as
** 'luaQ_allowgrowth' would; 0 (nothing changed) leaves every other case
** to it.
*/
l_sinline int luaQ_quickgrowth (luaQ_Meter *m, size_t n, lu_mem total) {
  lu_mem units = (m->allocated + n) / LUAQ_BYTES_PER_UNIT
                 - m->allocated / LUAQ_BYTES_PER_UNIT;
  if (m->stop != LUAQ_RUNNING || !m->active ||
      m->left < cast(l_mem, units) || m->sinceclock + n >= LUAQ_CLOCK_BYTES)
    return 0;
  if (m->memlimit != 0 && (n > m->memlimit || total > m->memlimit - n))
    return 0;
  m->allocated += n;
  m->left -= cast(l_mem, units);
  m->sinceclock += n;
  return 1;
}

/*
** Every block lmem.c allocates, resizes or frees goes through this
** (its 'callfrealloc'): the state's 'lua_Alloc', or, once the host has
** declared that blocks of that allocator are the C library's
** ('lua_meter_libcalloc'), realloc/free directly, as stock Lua's
** 'l_alloc' does. The state's own block ('lua_newstate'/'lua_close') and
** lauxlib's buffer boxes keep using the 'lua_Alloc'.
*/
l_sinline void *luaQ_librealloc (void *block, size_t ns) {
  if (ns == 0) {
    free(block);
    return NULL;
  }
  if (block == NULL)  /* most calls: a new block (realloc would check more) */
    return malloc(ns);
  return realloc(block, ns);
}

#define luaQ_frealloc(g,block,os,ns) \
  (l_likely((g)->meter.libcalloc) ? luaQ_librealloc(block, ns) \
                                  : (*(g)->frealloc)((g)->ud, block, os, ns))

/* Bytes held: Lua's own count, the buffer boxes and the host's errors */
#define luaQ_inuse(g)	(gettotalbytes(g) + (g)->meter.heldbytes)

/* The first try of a growth by 'n' bytes (lmem.c): 1 granted, 0 refused */
#define luaQ_grow(g,n) \
  (luaQ_quickgrowth(&(g)->meter, (n), luaQ_inuse(g)) || \
   luaQ_allowgrowth(g, n, 1))

/* The collector (lgc.c, lmem.c) */
LUAI_FUNC void luaQ_chargegc (struct global_State *g, lu_mem work);
LUAI_FUNC int luaQ_gcslots (struct global_State *g, lu_mem slots);
LUAI_FUNC void luaQ_setudatamt (lua_State *L, const struct Table *old,
                                const struct Table *mt);

/* Traversals ('luaH_next') */
LUAI_FUNC void luaQ_chargenext (lua_State *L, unsigned int asize,
                                unsigned int nsize, unsigned int from,
                                unsigned int to, int continues);

/* The process secret */
LUAI_FUNC uint64_t luaQ_mix (uint64_t x);
LUAI_FUNC unsigned int luaQ_hashlong (const char *s, size_t l,
                                      unsigned int seed);
LUAI_FUNC int luaQ_eqlngkey (struct TString *a, struct TString *b);
LUAI_FUNC unsigned int luaQ_seed (void);
LUAI_FUNC uint64_t luaQ_random (lua_State *L);

/* 'luai_makeseed' of lstate.c: the string seed of a new state */
#define luai_makeseed(L)	(cast_void(L), luaQ_seed())

#endif

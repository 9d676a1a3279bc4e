/*
** lmeterapi.h -- the API of quirl-lua-worker's meter (our code, not Lua's):
** what the host (the Rust worker) and the patched standard libraries call.
** See lmeter.h for the mechanism and the crate's README for every hunk.
*/

#ifndef lmeterapi_h
#define lmeterapi_h

#include <stddef.h>

#include "lua.h"

/* Why a state stopped; the first reason is kept. (Mirrored in Rust.) */
#define LUAQ_RUNNING		0
#define LUAQ_INSTRUCTIONS	1
#define LUAQ_WALLTIME		2
#define LUAQ_MEMORY		3
#define LUAQ_CANCELLED		4
#define LUAQ_EXTERNAL		5  /* recorded by the host (host calls, violations) */
#define LUAQ_EXIT		6  /* the guest's os.exit, recorded by the host: the
                                   one stop the host clears, between requests
                                   (lua_meter_clearexit) */

/*
** The API the host (the Rust worker) uses.
*/

typedef struct lua_MeterStatus {
  int stop;  /* LUAQ_* */
  int active;
  lua_Integer used;  /* units charged in the window (at the stop, if any) */
  lua_Integer limit;
  lua_Integer elapsed_ns;  /* since the window opened (to the stop, if any) */
  lua_Integer memory_in_use;  /* bytes */
  lua_Integer memory_limit;
  lua_Integer requested;  /* bytes of the refused allocation */
  lua_Integer memory_at_refusal;
} lua_MeterStatus;

LUA_API void lua_meter_configure (lua_State *L, size_t memlimit,
                                  const volatile unsigned char *cancel,
                                  int sandbox);
LUA_API void lua_meter_libcalloc (lua_State *L);
LUA_API void lua_meter_begin (lua_State *L, lua_Integer limit,
                              lua_Integer wall_ns);
LUA_API void lua_meter_end (lua_State *L);
LUA_API int lua_meter_stop (lua_State *L, int reason);
LUA_API void lua_meter_clearexit (lua_State *L);
LUA_API int lua_meter_charge (lua_State *L, lua_Integer units);
LUA_API int lua_meter_check (lua_State *L);
LUA_API void lua_meter_status (lua_State *L, lua_MeterStatus *out);
LUA_API lua_Integer lua_meter_remaining_ns (lua_State *L);
LUA_API lua_Integer lua_meter_objectid (lua_State *L, int idx);
LUA_API int lua_meter_pointerid (lua_State *L, int idx, char *buff,
                                 size_t size);
LUA_API unsigned int lua_meter_pivot (lua_State *L);
LUA_API int lua_meter_sandboxed (lua_State *L);
LUA_API int lua_meter_reserve (lua_State *L, double bytes);
LUA_API int lua_meter_box (lua_State *L, size_t oldsize, size_t newsize);
LUA_API lua_Integer lua_meter_loadedslots (lua_State *L, int idx);
LUA_API lua_Unsigned lua_meter_random (lua_State *L);
LUA_API lua_Integer lua_meter_gcwork (lua_State *L);
LUA_API void lua_meter_hosterrors (lua_State *L, int idx);


/* Raise the stop (never returns): for library code inside a call */
LUA_API void lua_meter_raise (lua_State *L);

/* Charge 'n' units from library code inside a call; raises the stop */
#define luaQ_libcharge(L,n) \
  { lua_Integer n_ = (n); \
    if (n_ > 0 && lua_meter_charge(L, n_) != LUAQ_RUNNING) \
      lua_meter_raise(L); }

/*
** Charge a loop of element moves as it goes ('done': moves made so far):
** the first LUAQ_LIB_SMALL are covered by the call, then one unit per
** element in batches of LUAQ_LIB_SMALL. A loop that an error (a
** metamethod) ends early pays for the moves it made, as stock Lua does
** them, not for all it was asked to make ('table.move' of 2^63 elements
** whose first '__newindex' fails).
*/
#define luaQ_libmoved(L,done) \
  { if ((done) > 0 && ((done) & (LUAQ_LIB_SMALL - 1)) == 0) \
      luaQ_libcharge(L, LUAQ_LIB_SMALL); }

/* Comparisons and searches go in windows: the first, and the largest */
#define LUAQ_FIRST_WINDOW	256
#define LUAQ_LAST_WINDOW	(1024 * 1024)

/* Native work of the libraries: what one unit pays for */
#define LUAQ_LIB_BYTES		64  /* bytes copied, or searched by 'memmem' */
/* Bytes compared or scanned by 'memcmp'/'memchr', which the C library runs
   vectorised: about the time of one instruction of the VM (BENCHMARKS.md,
   "What a unit costs, idiom by idiom") */
#define LUAQ_MEM_BYTES		256
#define LUAQ_SHORT_NEEDLE	64  /* a literal 'find' by memchr and memcmp */
#define LUAQ_LIB_SCAN_BYTES	16  /* bytes scanned one at a time */
#define LUAQ_LIB_SMALL		64  /* elements and bytes covered by the call */
/* Units of the collector's own work count ('gcwork': a slot traversed,
   an object swept) that a collection the program asks for is charged as
   one unit */
#define LUAQ_GC_WORK_PER_UNIT	2
/* Bytes of heap a switch of the collector's mode walks per unit (it is
   unpaced by allocation; lbaselib.c, 'gcswitched') */
#define LUAQ_HEAP_BYTES_PER_UNIT	64
/* Bytes of a name kept in a traceback of the sandbox (lauxlib.c) */
#define LUAQ_TRACEBACK_NAME	80
#define LUAQ_MATCH_BATCH	256  /* matcher steps charged at once */
#define LUAQ_SET_BYTES		16  /* bytes of a set class scanned per unit */
/* The capability lua.os (loslib.c; BENCHMARKS.md, "The lua.os and lua.io
   capabilities"): what a C library call costs beyond one instruction */
#define LUAQ_DATE_CONVERSION	4  /* a conversion of 'os.date' ('strftime') */
#define LUAQ_OS_CLOCK		8  /* 'os.clock' (a system call) */
#define LUAQ_OS_MKTIME		32  /* 'os.time' with a table ('mktime') */

/* 'l_randomizePivot' of ltablib.c: deterministic per state (ltablib.c) */
#define l_randomizePivot()	(lua_meter_pivot(L))

#endif

/*
** stock_lua.c -- the baseline interpreter of the benchmarks and
** differential tests: the unpatched Lua release this crate meters, with
** a minimal main of our own (lua-src ships no lua.c).
**
**   stock-lua FILE [CHUNKNAME]
**                    loads FILE as a chunk (named CHUNKNAME if given, as
**                    `=eval` names the worker's chunks), calls it with no
**                    arguments and prints what it returns, tab-separated,
**                    each value as tostring shows it; exit status 0.
**                    A load or run error goes to stderr (its error
**                    object as tostring shows it), exit status 1.
**
** Built by build.rs with the `stock-baseline` feature, from the same
** verified sources and with the same flags as the metered library
** (-O3 -DLUA_USE_LINUX -DLUA_COMPAT_5_3), none of our patch.
*/

#include <stdio.h>

#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"

/* Push the whole of FILE as a string. */
static void push_file(lua_State *L, const char *file) {
  luaL_Buffer buffer;
  char chunk[4096];
  size_t got;
  FILE *stream = fopen(file, "rb");
  if (stream == NULL)
    luaL_error(L, "cannot open %s", file);
  luaL_buffinit(L, &buffer);
  while ((got = fread(chunk, 1, sizeof chunk, stream)) > 0)
    luaL_addlstring(&buffer, chunk, got);
  if (ferror(stream)) {
    fclose(stream);
    luaL_error(L, "cannot read %s", file);
  }
  fclose(stream);
  luaL_pushresult(&buffer);
}

static int run(lua_State *L) {
  const char *file = (const char *)lua_touserdata(L, 1);
  const char *name = (const char *)lua_touserdata(L, 2);
  int base;
  int top;
  int i;
  lua_settop(L, 0);
  luaL_openlibs(L);
  if (name == NULL) {
    if (luaL_loadfile(L, file) != LUA_OK)
      return lua_error(L);
  } else {
    size_t length;
    const char *text;
    push_file(L, file);
    text = lua_tolstring(L, -1, &length);
    if (luaL_loadbuffer(L, text, length, name) != LUA_OK)
      return lua_error(L);
    lua_remove(L, -2);
  }
  base = lua_gettop(L);
  lua_call(L, 0, LUA_MULTRET);
  top = lua_gettop(L);
  for (i = base; i <= top; i++) {
    size_t length;
    const char *text = luaL_tolstring(L, i, &length);
    if (i > base)
      fputc('\t', stdout);
    fwrite(text, 1, length, stdout);
    lua_pop(L, 1);
  }
  fputc('\n', stdout);
  return 0;
}

/* Message handler: the error object as tostring shows it (a table
** error reads `table: 0x...`, as mlua shows it). */
static int describe(lua_State *L) {
  luaL_tolstring(L, 1, NULL);
  return 1;
}

int main(int argc, char **argv) {
  lua_State *L;
  int status;
  if (argc != 2 && argc != 3) {
    fprintf(stderr, "usage: %s FILE [CHUNKNAME]\n", argc > 0 ? argv[0] : "stock-lua");
    return 2;
  }
  L = luaL_newstate();
  if (L == NULL) {
    fputs("stock-lua: cannot create a state\n", stderr);
    return 1;
  }
  lua_pushcfunction(L, describe);
  lua_pushcfunction(L, run);
  lua_pushlightuserdata(L, argv[1]);
  lua_pushlightuserdata(L, argc == 3 ? argv[2] : NULL);
  status = lua_pcall(L, 2, 0, 1);
  if (status != LUA_OK) {
    const char *message = lua_tostring(L, -1);
    fprintf(stderr, "stock-lua: %s\n", message != NULL ? message : "(error object is not a string)");
  }
  lua_close(L);
  return status == LUA_OK ? 0 : 1;
}
